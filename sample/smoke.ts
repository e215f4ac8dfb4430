import type { INestApplication } from '@nestjs/common';
import { randomBytes } from 'node:crypto';
import { LedgerService } from './ledger.service';
import { MailerService } from './mailer.service';

const PAYMENTS = 3;
const TIMEOUT_MS = 30_000;

/**
 * SAMPLE_SMOKE=1: posts a few payments to the running app over HTTP and waits
 * until both groups have handled each one. CI runs it to prove the sample works.
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
  const pending = (): string[] => ids.filter((id) => !mailer.hasSent(id) || !ledger.hasRecorded(id));
  while (pending().length > 0) {
    if (Date.now() - started > TIMEOUT_MS) {
      console.error(`SAMPLE SMOKE FAILED: after ${TIMEOUT_MS} ms, not handled by both groups: ${pending().join(', ')}`);
      return false;
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  const totals = await (await fetch(`${baseUrl}/ledger`)).json();
  console.log(
    `SAMPLE SMOKE OK: ${PAYMENTS} payments posted over HTTP, handled by groups mailer and ledger in ${Date.now() - started} ms; ` +
      `GET /ledger: ${JSON.stringify(totals)}`,
  );
  return true;
}
