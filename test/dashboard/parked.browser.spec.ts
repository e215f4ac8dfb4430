import { INestApplication, Injectable, Module, Type } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import Redis from 'ioredis';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { Browser, Page } from 'playwright-core';
import { EventrailAdmin, EventrailMessage, EventrailModule, EventrailPublisher, OnEvent, PublishResult } from '../../lib';
import { EventrailDashboardModule } from '../../lib/dashboard/eventrail-dashboard.module';
import type { EventrailDashboardOptions } from '../../lib/dashboard/dashboard.options';
import { deletePrefix, testRedisUrl, uniquePrefix, waitFor } from '../support/helpers';
import { ARTIFACTS, browserSuite, launchChromium, watchPage } from './browser.harness';

const TOKEN = 'parked-test-token';
/** A key that tries to become markup: the panel must show it as text. */
const HOSTILE_KEY = '<img src=x onerror="globalThis.__xss = 1">';

const suite = browserSuite('the parked-keys browser test');

type Data = { key: string; n: number };
/** Keys in `down` fail; every success is recorded as `<key><n>`. */
const dependency = { down: new Set<string>(), handled: [] as string[] };

/** Parked heads wait ten minutes for their next tier: only the buttons move them within the test. */
@Injectable()
class Payments {
  @OnEvent('account.changed', {
    group: 'payments',
    ordering: 'key',
    maxRetries: 1,
    retryBackoffMs: 5,
    retryBackoffMaxMs: 10,
    redelivery: { delayMs: 600_000, maxDelayMs: 600_000, maxAgeMs: 3_600_000 },
  })
  handle(message: EventrailMessage<Data>): void {
    if (dependency.down.has(message.data.key)) throw new Error(`${message.data.key} is down`);
    dependency.handled.push(`${message.data.key}${message.data.n}`);
  }
}

async function startApp(
  prefix: string,
  dashboard: EventrailDashboardOptions,
  providers: Type[],
): Promise<{ app: INestApplication; url: string }> {
  @Module({
    imports: [EventrailModule.forRoot({ redis: testRedisUrl(), prefix, partitions: 1 }), EventrailDashboardModule.register(dashboard)],
    providers,
  })
  class AppModule {}
  const app = await NestFactory.create(AppModule, { logger: false });
  await app.listen(0, '127.0.0.1');
  return { app, url: `${await app.getUrl()}/eventrail` };
}

suite('dashboard in a real browser: parked keys', () => {
  let redis: Redis;
  let prefix: string;
  let browser: Browser;
  const apps: INestApplication[] = [];
  let admin: EventrailAdmin;
  let publisher: EventrailPublisher;
  let url: string;
  let published: PublishResult[];
  const handledOf = (key: string): string[] => dependency.handled.filter((name) => name.startsWith(key));
  const parkedKeys = async (): Promise<string[]> => (await admin.parkedKeys('payments')).map((p) => p.key);
  const publish = (names: string[]): Promise<PublishResult[]> =>
    publisher.publishMany(names.map((name) => ({ event: 'account.changed', data: { key: name[0], n: Number(name[1]) }, key: name[0] })));
  const openGroup = async (page: Page, base: string, token: string): Promise<void> => {
    await page.goto(base);
    await page.getByTestId('token-input').fill(token);
    await page.getByTestId('token-submit').click();
    await page.locator('[data-testid="group-card"][data-group="payments"]').getByTestId('group-link').click();
    await page.getByTestId('parked-panel').waitFor();
  };

  beforeAll(async () => {
    mkdirSync(ARTIFACTS, { recursive: true });
    redis = new Redis(testRedisUrl());
    prefix = uniquePrefix('dash-parked');
    const started = await startApp(prefix, { path: '/eventrail', auth: { token: TOKEN }, refreshMs: 500 }, [Payments]);
    apps.push(started.app);
    url = started.url;
    admin = started.app.get(EventrailAdmin);
    publisher = started.app.get(EventrailPublisher);
    browser = await launchChromium();
    dependency.down = new Set(['A', 'B']);
    published = await publish(['A1', 'A2', 'B1', 'C1']);
    await waitFor(async () => (await parkedKeys()).join() === 'A,B' && handledOf('C').length === 1, 'A and B parked, C handled');
  }, 60_000);

  afterAll(async () => {
    await browser?.close();
    await Promise.all(apps.map((app) => app.close()));
    if (redis) {
      await deletePrefix(redis, prefix);
      redis.disconnect();
    }
  });

  it('shows the parked keys on the group page, retries one, gives a head up and retries all, each through the dialog', async () => {
    const page = await (await browser.newContext({ viewport: { width: 1360, height: 900 } })).newPage();
    const problems = watchPage(page);
    await openGroup(page, url, TOKEN);
    const rows = page.getByTestId('parked-row');
    await rows.nth(1).waitFor();
    await expect(rows.count()).resolves.toBe(2);
    const cells = async (key: string): Promise<string[]> =>
      page.locator(`[data-testid="parked-row"][data-key="${key}"] td`).allTextContents();
    const [a, b] = await Promise.all([cells('A'), cells('B')]);
    // Key, partition, head, waiting, attempts, next attempt, error, actions.
    expect(a.slice(0, 5)).toEqual(['A', 'P0', 'account.changed', '2', '2']);
    expect(a[5]).toMatch(/^in \d+ min$/);
    expect(a[6]).toBe('Error: A is down');
    expect(a[7]).toBe('RetryGive up');
    expect(b.slice(0, 5)).toEqual(['B', 'P0', 'account.changed', '1', '2']);
    await expect(page.locator('[data-testid="parked-row"][data-key="A"] a').getAttribute('href')).resolves.toMatch(
      new RegExp(`#/log/0/${published[0].offset}$`),
    );
    await page.screenshot({ path: join(ARTIFACTS, 'dashboard-parked.png'), fullPage: true });

    // Retry B now (it is back): handled at once rather than at its tier ten minutes away.
    dependency.down.delete('B');
    const dialog = page.getByTestId('confirm-dialog');
    await page.locator('[data-testid="parked-row"][data-key="B"]').getByTestId('parked-retry').click();
    await dialog.waitFor({ state: 'visible' });
    await expect(page.locator('#confirm-message').textContent()).resolves.toMatch(
      /^Try the head of key "B" in group "payments" now, instead of in \d+ min\?$/,
    );
    await page.getByTestId('confirm-ok').click();
    await page.getByTestId('toast').filter({ hasText: 'Retrying key "B"' }).waitFor();
    await waitFor(() => handledOf('B').length === 1, 'B1 handled after the retry');
    await page.locator('[data-testid="parked-row"][data-key="B"]').waitFor({ state: 'detached' });
    await expect(rows.count()).resolves.toBe(1);

    // Give up A's head: cancelled first (nothing changes), then confirmed.
    dependency.down.delete('A');
    const giveUp = page.locator('[data-testid="parked-row"][data-key="A"]').getByTestId('parked-give-up');
    await giveUp.click();
    await dialog.waitFor({ state: 'visible' });
    await expect(page.locator('#confirm-message').textContent()).resolves.toBe(
      `Dead-letter ${published[0].offset}, the head of key "A" in group "payments" (1 more wait behind it and go next)? It can be replayed from the dead letters.`,
    );
    await page.getByTestId('confirm-cancel').click();
    await dialog.waitFor({ state: 'hidden' });
    expect(await admin.deadLetterCount('payments')).toBe(0);
    expect(await parkedKeys()).toEqual(['A']);
    await giveUp.click();
    await dialog.waitFor({ state: 'visible' });
    await page.getByTestId('confirm-ok').click();
    await page.getByTestId('toast').filter({ hasText: 'Gave up the head of key "A"' }).waitFor();
    await waitFor(() => handledOf('A').length === 1, 'A2 handled after the give-up');
    expect(handledOf('A')).toEqual(['A2']);
    const [letter] = await admin.deadLetters('payments');
    expect(letter).toMatchObject({ eventId: published[0].id, reason: 'retries-exhausted' });
    await page.getByTestId('parked-table-empty').waitFor();
    await expect(page.getByTestId('parked-retry-all').count()).resolves.toBe(0);

    // Two keys parked again, one of them trying to become markup; Retry all sends both.
    dependency.down = new Set(['D', HOSTILE_KEY[0]]);
    await publisher.publishMany([
      { event: 'account.changed', data: { key: 'D', n: 1 }, key: 'D' },
      { event: 'account.changed', data: { key: HOSTILE_KEY[0], n: 1 }, key: HOSTILE_KEY },
    ]);
    await rows.nth(1).waitFor();
    await expect(page.locator('[data-testid="parked-row"] td:first-child').allTextContents()).resolves.toEqual(['D', HOSTILE_KEY]);
    await expect(page.locator('main img').count()).resolves.toBe(0);
    dependency.down.clear();
    await page.getByTestId('parked-retry-all').click();
    await dialog.waitFor({ state: 'visible' });
    await expect(page.locator('#confirm-message').textContent()).resolves.toBe(
      'Try the heads of all 2 parked keys of group "payments" now, instead of at their next attempt?',
    );
    await page.getByTestId('confirm-ok').click();
    await page.getByTestId('toast').filter({ hasText: 'Retrying 2 parked keys' }).waitFor();
    await waitFor(() => handledOf('D').length === 1 && handledOf(HOSTILE_KEY[0]).length === 1, 'both heads handled after the retry');
    await page.getByTestId('parked-table-empty').waitFor();
    await expect(page.evaluate('globalThis.__xss')).resolves.toBeUndefined();
    expect(problems).toEqual([]);
  }, 90_000);

  it('read-only: lists the parked keys without write controls', async () => {
    dependency.down = new Set(['E']);
    await publish(['E1', 'E2']);
    await waitFor(async () => (await parkedKeys()).join() === 'E', 'E parked');
    const readOnly = await startApp(prefix, { path: '/eventrail', readOnly: true, auth: { token: TOKEN }, refreshMs: 500 }, []);
    apps.push(readOnly.app);
    const page = await (await browser.newContext({ viewport: { width: 1360, height: 900 } })).newPage();
    const problems = watchPage(page);
    await openGroup(page, readOnly.url, TOKEN);
    await page.locator('[data-testid="parked-row"][data-key="E"]').waitFor();
    await expect(page.locator('[data-testid="parked-row"][data-key="E"] td:nth-child(4)').textContent()).resolves.toBe('2');
    for (const testid of ['parked-retry', 'parked-give-up', 'parked-retry-all']) {
      await expect(page.getByTestId(testid).count()).resolves.toBe(0);
    }
    await page.screenshot({ path: join(ARTIFACTS, 'dashboard-parked-read-only.png'), fullPage: true });
    expect(problems).toEqual([]);
  }, 60_000);
});
