import type { INestApplication } from '@nestjs/common';
import { randomBytes } from 'node:crypto';
import { EventrailDashboardLink } from 'nestjs-eventrail';
import { AuditLogService } from './audit-log.service';
import { LedgerService } from './ledger.service';
import { MailerService } from './mailer.service';

const PAYMENTS = 3;
const TIMEOUT_MS = 30_000;
/** Leases left by an earlier sample that died (not stopped) expire after `lockTtlMs` (30 s); allow for that. */
const HEALTH_TIMEOUT_MS = 45_000;

/**
 * SAMPLE_SMOKE=1: posts a few payments to the running app over HTTP and waits
 * until both groups have handled each one, then checks that GET /health says
 * ok and GET /metrics counts the processed messages. CI runs it to prove the
 * sample works.
 */
export async function runSmoke(app: INestApplication, baseUrl: string): Promise<boolean> {
  const started = Date.now();
  const run = randomBytes(4).toString('hex');
  const ids = Array.from({ length: PAYMENTS }, (_, n) => `smoke-${run}-${n + 1}`);
  for (const [n, id] of ids.entries()) {
    const response = await fetch(`${baseUrl}/payments`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ id, amountCents: 100 * (n + 1), currency: 'EUR', email: `smoke${n + 1}@example.com` }),
    });
    if (response.status !== 202) {
      console.error(`SAMPLE SMOKE FAILED: POST /payments answered ${response.status}: ${await response.text()}`);
      return false;
    }
  }

  const mailer = app.get(MailerService);
  const ledger = app.get(LedgerService);
  const audit = app.get(AuditLogService);
  const pending = (): string[] => ids.filter((id) => !mailer.hasSent(id) || !ledger.hasRecorded(id) || !audit.hasRecorded(id));
  while (pending().length > 0) {
    if (Date.now() - started > TIMEOUT_MS) {
      console.error(`SAMPLE SMOKE FAILED: after ${TIMEOUT_MS} ms, not handled by every group: ${pending().join(', ')}`);
      return false;
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  const totals = await (await fetch(`${baseUrl}/ledger`)).json();
  const orders = await ordersAreBilled(baseUrl, run, started);
  if (orders === null) return false;
  if (!(await healthIsOk(baseUrl)) || !(await metricsAreExposed(baseUrl)) || !(await dashboardAnswers(app))) return false;
  console.log(
    `SAMPLE SMOKE OK: ${PAYMENTS} payments posted over HTTP, handled by groups mailer and ledger and by the batch handler of audit ` +
      `(${JSON.stringify(audit.stats())}) in ${Date.now() - started} ms; ` +
      `GET /ledger: ${JSON.stringify(totals)}; ${orders}; GET /health: ok; GET /metrics: eventrail_messages_processed_total and eventrail_group_members present; ` +
      `the logged dashboard link: the page, and its API listing both groups with the link's token`,
  );
  return true;
}

/**
 * The orders flow: POST /orders saves orders and stages their events through the outbox; the relay
 * appends them after commit and group `billing` writes one invoice per order through the inbox.
 * Returns what it saw, or null (after saying why) when an invoice is missing.
 */
async function ordersAreBilled(baseUrl: string, run: string, started: number): Promise<string | null> {
  const customer = `smoke-${run}`;
  const placed: number[] = [];
  for (const amountCents of [1250, 990]) {
    const response = await fetch(`${baseUrl}/orders`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ customer, amountCents }),
    });
    if (response.status !== 201) {
      console.error(`SAMPLE SMOKE FAILED: POST /orders answered ${response.status}: ${await response.text()}`);
      return null;
    }
    placed.push(((await response.json()) as { orderId: number }).orderId);
  }
  const billed = async (): Promise<number[]> =>
    ((await (await fetch(`${baseUrl}/invoices`)).json()) as Array<{ order_id: number }>).map((row) => row.order_id);
  for (;;) {
    const invoices = await billed();
    if (placed.every((id) => invoices.includes(id))) {
      return `POST /orders: ${placed.length} orders, each invoiced once by group billing through the outbox and the inbox`;
    }
    if (Date.now() - started > TIMEOUT_MS) {
      console.error(
        `SAMPLE SMOKE FAILED: after ${TIMEOUT_MS} ms, orders ${placed.join(', ')} not all invoiced: ${JSON.stringify(invoices)}`,
      );
      return null;
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

/** Polls GET /health until it answers 200 with `status: "ok"`. */
async function healthIsOk(baseUrl: string): Promise<boolean> {
  const deadline = Date.now() + HEALTH_TIMEOUT_MS;
  for (;;) {
    const response = await fetch(`${baseUrl}/health`);
    const body = await response.text();
    if (response.status === 200 && (JSON.parse(body) as { status?: unknown }).status === 'ok') return true;
    if (Date.now() > deadline) {
      console.error(`SAMPLE SMOKE FAILED: GET /health not ok after ${HEALTH_TIMEOUT_MS} ms; last answer: ${response.status} ${body}`);
      return false;
    }
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
}

/** GET /metrics has the processed counter of both groups (hooks) and their live members (read from Redis). */
async function metricsAreExposed(baseUrl: string): Promise<boolean> {
  const response = await fetch(`${baseUrl}/metrics`);
  const text = await response.text();
  const expected = ['mailer', 'ledger'].flatMap((group) => [
    `^eventrail_messages_processed_total\\{group="${group}",event="payment\\.completed"\\} [1-9]`,
    `^eventrail_group_members\\{group="${group}"\\} [1-9]`,
  ]);
  const missing = expected.filter((pattern) => !new RegExp(pattern, 'm').test(text));
  if (response.status === 200 && missing.length === 0) return true;
  console.error(`SAMPLE SMOKE FAILED: GET /metrics (${response.status}) lacks ${missing.join(', ')}:\n${text.slice(0, 2000)}`);
  return false;
}

/**
 * The dashboard as a developer opens it: the link the app logged (with the generated token in its fragment,
 * unless EVENTRAIL_DASHBOARD_TOKEN is set) serves the page, and the API, called with that token the way the
 * page calls it, lists both groups.
 */
async function dashboardAnswers(app: INestApplication): Promise<boolean> {
  const link = app.get(EventrailDashboardLink).url;
  if (link === null) {
    console.error('SAMPLE SMOKE FAILED: the dashboard logged no link');
    return false;
  }
  const url = new URL(link);
  const token = new URLSearchParams(url.hash.slice(1)).get('token') ?? process.env.EVENTRAIL_DASHBOARD_TOKEN;
  const headers: Record<string, string> = token ? { authorization: `Bearer ${token}` } : {};
  const page = await fetch(`${url.origin}${url.pathname}`);
  const html = await page.text();
  const overview = await fetch(`${url.origin}${url.pathname}/api/overview`, { headers });
  const body = await overview.text();
  const groups = overview.status === 200 ? (JSON.parse(body) as { groups: Array<{ name: string }> }).groups.map((g) => g.name) : [];
  if (page.status === 200 && html.includes(`<base href="${url.pathname}/"`) && groups.includes('mailer') && groups.includes('ledger')) {
    return true;
  }
  console.error(
    `SAMPLE SMOKE FAILED: GET ${url.pathname} answered ${page.status}; GET ${url.pathname}/api/overview ${overview.status} ${body.slice(0, 500)}`,
  );
  return false;
}
