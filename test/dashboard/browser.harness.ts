import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { Browser, chromium, Page } from 'playwright-core';

/** What the dashboard's browser tests share: the Chromium they drive, where screenshots go, and the page watch. */

export const CHROMIUM = process.env.EVENTRAIL_CHROMIUM ?? '/usr/bin/chromium';
export const ARTIFACTS = join(__dirname, '..', 'artifacts');

const haveChromium = existsSync(CHROMIUM);
if (!haveChromium && process.env.CI) {
  throw new Error(`Chromium not found at ${CHROMIUM}: .ci/run installs it (apt-get install chromium), or set EVENTRAIL_CHROMIUM`);
}

/** `describe`, or `describe.skip` with a warning on a machine without Chromium (CI fails above instead). */
export function browserSuite(name: string): jest.Describe {
  if (haveChromium) return describe;
  console.warn(`Skipping ${name}: no Chromium at ${CHROMIUM}. Install it with \`apt-get install chromium\` or set EVENTRAIL_CHROMIUM.`);
  return describe.skip;
}

export function launchChromium(): Promise<Browser> {
  return chromium.launch({
    executablePath: CHROMIUM,
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
  });
}

/** Fails the test on script errors and CSP violations, which a strict CSP turns into console errors. */
export function watchPage(page: Page): string[] {
  const problems: string[] = [];
  page.on('pageerror', (error) => problems.push(`page error: ${error.message}`));
  page.on('console', (message) => {
    if (message.type() === 'error' && /Content Security Policy|Refused to/i.test(message.text())) problems.push(message.text());
  });
  return problems;
}
