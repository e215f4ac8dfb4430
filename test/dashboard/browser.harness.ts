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

/** Each watched page's failed requests, refused answers (400 and above) and console errors, for `waitVisible`'s message. */
const pageLogs = new WeakMap<Page, string[]>();

/** Fails the test on script errors and CSP violations, which a strict CSP turns into console errors. */
export function watchPage(page: Page): string[] {
  const problems: string[] = [];
  const log: string[] = [];
  pageLogs.set(page, log);
  page.on('pageerror', (error) => problems.push(`page error: ${error.message}`));
  page.on('console', (message) => {
    if (message.type() === 'error') log.push(`console: ${message.text()}`);
    if (message.type() === 'error' && /Content Security Policy|Refused to/i.test(message.text())) problems.push(message.text());
  });
  page.on('requestfailed', (request) => log.push(`failed: ${request.method()} ${request.url()} (${request.failure()?.errorText ?? '?'})`));
  page.on('response', (response) => {
    if (response.status() >= 400) log.push(`${response.status()}: ${response.request().method()} ${response.url()}`);
  });
  return problems;
}

/**
 * Waits for the element of `testid` to be visible. When it never is, the error says what the page showed
 * (its view and its "updated" line) and, for a page `watchPage` watches, which requests failed or were refused.
 */
export async function waitVisible(page: Page, testid: string): Promise<void> {
  try {
    await page.getByTestId(testid).waitFor({ state: 'visible' });
  } catch (error) {
    const text = (selector: string): Promise<string> =>
      page
        .locator(selector)
        .innerText({ timeout: 1_000 })
        .then(
          (shown) => shown.slice(0, 500),
          (failure: unknown) => `(${String(failure).split('\n')[0]})`,
        );
    const shown = { view: await text('#view'), updated: await text('#updated') };
    const requests = pageLogs.get(page) ?? ['(page not watched)'];
    throw new Error(
      `${testid} never became visible (${String(error).split('\n')[0]}); the page showed ${JSON.stringify(shown)}; ` +
        `requests and console errors: ${JSON.stringify(requests)}`,
      { cause: error },
    );
  }
}
