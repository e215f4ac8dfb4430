import { INestApplication, Injectable, Module, Type } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import Redis from 'ioredis';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { Browser, BrowserContext, Page } from 'playwright-core';
import {
  EventrailAdmin,
  EventrailDashboardLink,
  EventrailMessage,
  EventrailModule,
  EventrailPublisher,
  NonRetryableError,
  OnEvent,
  PublishResult,
} from '../../lib';
import { EventrailDashboardModule } from '../../lib/dashboard/eventrail-dashboard.module';
import { EventrailKeys } from '../../lib/redis/keys';
import type { EventrailDashboardOptions } from '../../lib/dashboard/dashboard.options';
import { deletePrefix, testRedisUrl, uniquePrefix, waitFor } from '../support/helpers';
import { ARTIFACTS, browserSuite, launchChromium, waitVisible, watchPage } from './browser.harness';

const TOKEN = 'test-token';
/** The dead letter whose payload tries to become markup. */
const HOSTILE_NOTE = '<img src=x onerror="globalThis.__xss = 1"><b>gift wrap</b>';

const suite = browserSuite('the dashboard browser test');

interface Order {
  orderId: string;
  amount: number;
  currency: string;
  note?: string;
}

/** Billing declines every order while `failing` is on: a NonRetryableError dead-letters the event at once. */
const billing = { failing: true, handled: [] as string[] };

@Injectable()
class Billing {
  @OnEvent('order.placed', 'billing')
  charge(message: EventrailMessage<Order>): void {
    if (billing.failing) throw new NonRetryableError(`Card declined for order ${message.data.orderId}`);
    billing.handled.push(message.id);
  }
}

@Injectable()
class Shipping {
  @OnEvent(['order.placed', 'order.shipped'], 'shipping')
  ship(): void {}
}

@Injectable()
class Notifications {
  @OnEvent(['order.shipped', 'invoice.paid'], 'notifications')
  notify(): void {}
}

async function startApp(
  prefix: string,
  dashboard: EventrailDashboardOptions,
  providers: Type[],
  adapter: 'express' | 'fastify' = 'express',
): Promise<{ app: INestApplication; url: string }> {
  @Module({
    imports: [EventrailModule.forRoot({ redis: testRedisUrl(), prefix, partitions: 4 }), EventrailDashboardModule.register(dashboard)],
    providers,
  })
  class AppModule {}
  const app =
    adapter === 'fastify'
      ? await NestFactory.create(AppModule, new FastifyAdapter(), { logger: false })
      : await NestFactory.create(AppModule, { logger: false });
  await app.listen(0, '127.0.0.1');
  return { app, url: `${await app.getUrl()}/eventrail` };
}

suite('dashboard in a real browser', () => {
  let redis: Redis;
  let prefix: string;
  let browser: Browser;
  let app: INestApplication;
  let url: string;
  let publisher: EventrailPublisher;
  let admin: EventrailAdmin;
  let hostile: PublishResult;
  const contexts: BrowserContext[] = [];
  const extraApps: INestApplication[] = [];

  const newPage = async (colorScheme: 'light' | 'dark' = 'light'): Promise<Page> => {
    const context = await browser.newContext({ viewport: { width: 1360, height: 900 }, colorScheme });
    contexts.push(context);
    return context.newPage();
  };
  const shot = (page: Page, name: string): Promise<Buffer> => page.screenshot({ path: join(ARTIFACTS, name), fullPage: true });
  let sequence = 0;
  const trickle = (count: number): Promise<PublishResult[]> =>
    publisher.publishMany(
      Array.from({ length: count }, () => {
        sequence += 1;
        const customer = `customer-${(sequence * 7) % 23}`;
        return sequence % 3 === 0
          ? { event: 'invoice.paid', data: { invoiceId: `inv-${sequence}`, amount: 20 + (sequence % 9) * 5 }, key: customer }
          : { event: 'order.shipped', data: { orderId: `o-${2000 + sequence}`, carrier: 'DHL' }, key: customer };
      }),
    );

  beforeAll(async () => {
    mkdirSync(ARTIFACTS, { recursive: true });
    redis = new Redis(testRedisUrl());
    prefix = uniquePrefix('dash');
    ({ app, url } = await startApp(prefix, { path: '/eventrail', auth: { token: TOKEN }, refreshMs: 500 }, [
      Billing,
      Shipping,
      Notifications,
    ]));
    publisher = app.get(EventrailPublisher);
    admin = app.get(EventrailAdmin);
    // A group nobody consumes any more: all of the log is its lag.
    await redis.sadd(new EventrailKeys(prefix, 4).groups, 'analytics');
    browser = await launchChromium();

    const placed = await publisher.publishMany([
      { event: 'order.placed', data: { orderId: 'o-1001', amount: 129.9, currency: 'EUR' }, key: 'customer-3' },
      { event: 'order.placed', data: { orderId: 'o-1002', amount: 42, currency: 'EUR' }, key: 'customer-8' },
      { event: 'order.placed', data: { orderId: 'o-1003', amount: 18.5, currency: 'EUR', note: HOSTILE_NOTE }, key: 'customer-<b>13</b>' },
    ]);
    hostile = placed[2];
    await trickle(30);
    await waitFor(async () => (await admin.group('billing')).deadLetters === 3, 'three dead letters in billing');
  }, 60_000);

  afterAll(async () => {
    await Promise.all(contexts.map((c) => c.close()));
    await browser?.close();
    await Promise.all([...extraApps, app].filter(Boolean).map((a) => a.close()));
    if (redis) {
      await deletePrefix(redis, prefix);
      redis.disconnect();
    }
  });

  it('shows live data, escapes payloads, replays a dead letter and browses the log', async () => {
    const page = await newPage();
    const problems = watchPage(page);
    const response = await page.goto(url);
    expect(response?.headers()['content-security-policy']).toMatch(/default-src 'self'/);

    // A wrong token is refused and asked for again; the right one opens the overview.
    await page.getByTestId('token-input').fill('wrong-token');
    await page.getByTestId('token-submit').click();
    await expect(page.getByTestId('token-form').getByTestId('notice').textContent()).resolves.toMatch(/refused/);
    await page.getByTestId('token-input').fill(TOKEN);
    await page.getByTestId('token-submit').click();

    const billingCard = page.locator('[data-testid="group-card"][data-group="billing"]');
    await billingCard.getByTestId('dlq-count').filter({ hasText: /^3$/ }).waitFor();
    // Survives only if every page below is reached without reloading the document.
    await page.evaluate('globalThis.__sameDocument = true');
    await expect(page.locator('[data-testid="group-card"]').count()).resolves.toBe(4);
    await expect(billingCard.getByTestId('members-count').textContent()).resolves.toBe('1 member');
    await expect(page.getByTestId('redis-memory').textContent()).resolves.toMatch(/^\d+(\.\d)? (B|KiB|MiB|GiB)$/);
    await expect(page.getByTestId('redis-status').textContent()).resolves.toBe('ready');

    // Live data: keep publishing while the page refreshes, until the charts have a few minutes' worth of shape.
    const analyticsLine = page.locator('[data-testid="group-card"][data-group="analytics"] [data-testid="lag-chart"] polyline').first();
    await waitFor(
      async () => {
        await trickle(4 + (sequence % 5));
        const points = (await analyticsLine.count()) ? ((await analyticsLine.getAttribute('points')) ?? '').split(' ').length : 0;
        return points >= 8 && (await page.locator('[data-testid="throughput-chart"] polyline').count()) === 1;
      },
      'lag and throughput charts with several samples',
      30_000,
      400,
    );
    await expect(page.getByTestId('throughput').textContent()).resolves.toMatch(/^\d+(\.\d)? \/s$/);
    await expect(billingCard.locator('[data-testid="lag-chart"] svg').count()).resolves.toBe(1);
    await expect(page.locator('[data-group="analytics"] [data-testid="group-lag"]').textContent()).resolves.toMatch(/^[1-9][\d,]*\+?$/);
    await shot(page, 'dashboard-overview.png');

    // Dead letters: the hostile payload is shown as text, never as markup.
    billing.failing = false;
    await billingCard.getByTestId('dlq-count').click();
    await page.getByTestId('dlq-total').filter({ hasText: /^3$/ }).waitFor();
    await expect(page.getByTestId('dl-row').count()).resolves.toBe(3);
    await page.getByTestId('dl-row').filter({ hasText: 'o-1003' }).click();
    const payload = page.getByTestId('dl-payload');
    await payload.filter({ hasText: 'o-1003' }).waitFor();
    const payloadText = (await payload.textContent()) ?? '';
    expect(JSON.parse(payloadText)).toEqual({ orderId: 'o-1003', amount: 18.5, currency: 'EUR', note: HOSTILE_NOTE });
    expect(payloadText).toContain('<b>gift wrap</b>');
    await expect(page.getByTestId('dl-error').textContent()).resolves.toBe('NonRetryableError: Card declined for order o-1003');
    await expect(page.locator('main img, main b').count()).resolves.toBe(0);
    await expect(page.getByTestId('dl-row').filter({ hasText: 'customer-<b>13</b>' }).count()).resolves.toBe(1);
    await expect(page.evaluate('globalThis.__xss')).resolves.toBeUndefined();
    await shot(page, 'dashboard-dead-letters.png');

    // Replay it from its panel, through the confirmation dialog.
    await page.getByTestId('dl-replay').click();
    const dialog = page.getByTestId('confirm-dialog');
    await dialog.waitFor({ state: 'visible' });
    await expect(dialog.textContent()).resolves.toContain('billing');
    await page.getByTestId('confirm-ok').click();
    await page.getByTestId('toast').filter({ hasText: 'Replayed 1' }).waitFor();
    await page.getByTestId('dlq-total').filter({ hasText: /^2$/ }).waitFor();
    await expect(page.getByTestId('dl-row').count()).resolves.toBe(2);
    await expect(page.getByTestId('dl-panel').isHidden()).resolves.toBe(true);
    await waitFor(() => billing.handled.includes(hostile.id), 'billing handled the replayed event');
    expect(billing.handled).toEqual([hostile.id]);
    await shot(page, 'dashboard-after-replay.png');

    // Cancelling the dialog changes nothing.
    await page.getByTestId('replay-all').click();
    await page.getByTestId('confirm-cancel').click();
    await dialog.waitFor({ state: 'hidden' });
    expect((await admin.group('billing')).deadLetters).toBe(2);

    // A checked row stays checked across auto-refreshes.
    await page.getByTestId('dl-select').first().check();
    await page.getByTestId('replay-selected').filter({ hasText: 'Replay selected (1)' }).waitFor();
    const updated = await page.getByTestId('last-updated').textContent();
    await waitFor(async () => (await page.getByTestId('last-updated').textContent()) !== updated, 'an auto-refresh');
    await expect(page.getByTestId('dl-select').first().isChecked()).resolves.toBe(true);
    await page.getByTestId('dl-select').first().uncheck();

    // The overview has caught up too.
    await page.locator('a[data-nav="overview"]').click();
    await billingCard.getByTestId('dlq-count').filter({ hasText: /^2$/ }).waitFor();

    // The group page: partitions, members and the newest errors.
    await billingCard.getByTestId('group-link').click();
    await page.getByTestId('error-row').nth(1).waitFor();
    await expect(page.getByTestId('partition-row').count()).resolves.toBe(4);
    await expect(page.getByTestId('member-row').count()).resolves.toBe(1);
    await expect(page.getByTestId('error-row').count()).resolves.toBe(2);
    await expect(page.getByTestId('members-table').textContent()).resolves.toContain(String(process.pid));
    await shot(page, 'dashboard-group.png');

    await expect(page.evaluate('globalThis.__sameDocument')).resolves.toBe(true);

    // The log: the hostile event's partition, filtered by type, and the event itself.
    await page.goto(`${url}#/log?partition=${hostile.partition}`);
    await page.getByTestId('log-row').first().waitFor();
    await page.getByTestId('log-event').fill('order.placed');
    await page.getByTestId('log-apply').click();
    await page.waitForURL(/event=order\.placed/);
    const rows = page.getByTestId('log-row');
    // The filtered page replaces the first one: the original entry and its replayed copy, marked as meant for billing alone.
    const eventCells = page.locator('[data-testid="log-row"] td:nth-child(3)');
    await waitFor(async () => {
      const events = await eventCells.allTextContents();
      return (
        events.every((event) => event.startsWith('order.placed')) &&
        events.filter((event) => event === 'order.placed → billing').length === 1
      );
    }, 'log rows filtered to order.placed');
    await rows.filter({ hasText: hostile.offset }).first().waitFor();
    await shot(page, 'dashboard-log.png');
    await rows.filter({ hasText: hostile.offset }).first().click();
    await page.getByTestId('event-title').filter({ hasText: 'order.placed' }).waitFor();
    await expect(page.getByTestId('event-data').textContent()).resolves.toContain('<b>gift wrap</b>');
    await expect(page.locator('main img, main b').count()).resolves.toBe(0);

    // Back to the dead letters: replay a selected one, then purge the rest, each through the dialog.
    await page.goto(`${url}#/groups/billing/dead-letters`);
    await page.getByTestId('dlq-total').filter({ hasText: /^2$/ }).waitFor();
    const selectedKey = (await page.getByTestId('dl-row').first().locator('td:nth-child(3)').textContent()) ?? '';
    await page.getByTestId('dl-select').first().check();
    await page.getByTestId('replay-selected').filter({ hasText: 'Replay selected (1)' }).click();
    await dialog.waitFor({ state: 'visible' });
    await expect(page.locator('#confirm-message').textContent()).resolves.toBe(
      'Append 1 dead letter back to the log for group "billing" (only this group handles it again)?',
    );
    await page.getByTestId('confirm-ok').click();
    await page.getByTestId('dlq-total').filter({ hasText: /^1$/ }).waitFor();
    await page.getByTestId('toast').filter({ hasText: 'Replayed 1' }).first().waitFor();
    await expect(page.getByTestId('dl-row').filter({ hasText: selectedKey }).count()).resolves.toBe(0);
    await expect(page.getByTestId('replay-selected').isDisabled()).resolves.toBe(true);
    expect((await admin.group('billing')).deadLetters).toBe(1);
    await waitFor(() => billing.handled.length === 2, 'billing handled the selected dead letter');

    await page.getByTestId('purge-all').click();
    await dialog.waitFor({ state: 'visible' });
    await expect(page.locator('#confirm-message').textContent()).resolves.toContain('Delete the 1 dead letter of group "billing"');
    await page.getByTestId('confirm-ok').click();
    await page.getByTestId('toast').filter({ hasText: 'Purged 1' }).waitFor();
    await page.getByTestId('dlq-total').filter({ hasText: /^0$/ }).waitFor();
    await page.getByTestId('dl-table-empty').waitFor();
    expect((await admin.group('billing')).deadLetters).toBe(0);
    expect(billing.handled).toHaveLength(2);

    expect(problems).toEqual([]);
  }, 120_000);

  it('read-only (on Fastify): shows no write controls and the API refuses writes', async () => {
    // A second app on the same log, without handlers, serving a read-only dashboard without a configured
    // token: it generates one and logs the link that carries it, which is what a developer opens.
    const readOnly = await startApp(prefix, { path: '/eventrail', readOnly: true, refreshMs: 500 }, [], 'fastify');
    extraApps.push(readOnly.app);
    const link = readOnly.app.get(EventrailDashboardLink).url ?? '';
    expect(link).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/eventrail#token=[\w-]+$/);
    const token = new URL(link).hash.slice('#token='.length);
    // The first test purged billing's dead letters: make one to look at.
    billing.failing = true;
    await publisher.publishMany([{ event: 'order.placed', data: { orderId: 'o-1004', amount: 7, currency: 'EUR' }, key: 'customer-5' }]);
    await waitFor(async () => (await admin.group('billing')).deadLetters === 1, 'a new dead letter in billing');
    const page = await newPage('dark');
    const problems = watchPage(page);
    await page.goto(link);
    await waitVisible(page, 'readonly-badge');
    // The UI took the token from the fragment and took it out of the address bar: no sign-in form.
    await page.locator('[data-testid="group-card"][data-group="billing"]').waitFor();
    expect(page.url()).toBe(`${readOnly.url}#/`);
    await expect(page.getByTestId('token-form').count()).resolves.toBe(0);
    await page.goto(`${readOnly.url}#/groups/billing/dead-letters`);
    const count = (await admin.group('billing')).deadLetters;
    expect(count).toBe(1);
    await page
      .getByTestId('dlq-total')
      .filter({ hasText: new RegExp(`^${count}$`) })
      .waitFor();
    await expect(page.getByTestId('dl-row').count()).resolves.toBe(count);
    await page.getByTestId('dl-row').first().click();
    await page.getByTestId('dl-payload').waitFor();
    for (const testid of ['replay-one', 'replay-selected', 'replay-all', 'purge-all', 'dl-select', 'dl-replay']) {
      await expect(page.getByTestId(testid).count()).resolves.toBe(0);
    }
    await shot(page, 'dashboard-read-only.png');

    const refused = await fetch(`${readOnly.url}/api/groups/billing/dead-letters/replay`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
      body: JSON.stringify({ all: true }),
    });
    expect(refused.status).toBe(403);
    expect((await admin.group('billing')).deadLetters).toBe(count);
    expect(problems).toEqual([]);
  }, 60_000);

  it('comes up on its own when its configuration cannot be loaded at first (the app restarting, a dropped request)', async () => {
    const page = await newPage();
    const problems = watchPage(page);
    // The first two asks fail as a restarting app and a dropped connection would; the third goes through.
    let asked = 0;
    await page.route('**/eventrail/api/config', async (route) => {
      asked++;
      if (asked === 1) await route.fulfill({ status: 503, contentType: 'application/json', body: '{"message":"starting"}' });
      else if (asked === 2) await route.abort('connectionreset');
      else await route.continue();
    });
    await page.goto(`${url}#token=${TOKEN}`);
    await page
      .getByTestId('notice')
      .filter({ hasText: /Cannot load the dashboard configuration: starting\. Trying again in 1 s/ })
      .waitFor();
    await page.locator('[data-testid="group-card"][data-group="billing"]').waitFor();
    expect(asked).toBe(3);
    await expect(page.getByTestId('token-form').count()).resolves.toBe(0);
    expect(problems).toEqual([]);
  }, 60_000);

  it('shows a refused configuration (a 4xx) without asking again, and starts nothing', async () => {
    const page = await newPage();
    let asked = 0;
    await page.route('**/eventrail/api/config', async (route) => {
      asked++;
      await route.fulfill({ status: 403, contentType: 'application/json', body: '{"message":"this machine only"}' });
    });
    await page.goto(`${url}#token=${TOKEN}`);
    const shown = page.getByTestId('notice').filter({ hasText: /^Cannot load the dashboard configuration: this machine only$/ });
    await shown.waitFor();
    expect(asked).toBe(1);
    await expect(page.locator('[data-testid="group-card"]').count()).resolves.toBe(0);
  }, 60_000);
});
