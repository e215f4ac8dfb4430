/**
 * The inbox on embedded PGlite where the database fails it, in a process of its own (PGlite does not
 * load inside Jest's VM): a work that catches a SQL error, and the database closed while a handle is
 * in flight and before the next. Reports to the parent over IPC what each handle did and what the
 * database holds; reporting at all shows the process outlived it. Env: PGLITE_REDIS_URL, PGLITE_PREFIX.
 */
import 'reflect-metadata';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PGlite, Transaction } from '@electric-sql/pglite';
import { Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { EventrailModule } from '../../lib';
import { EventrailInbox, EventrailOutboxModule, InboxTransactionAbortedError, pgliteConnector } from '../../lib/outbox';

/** On disk, so what the in-flight handle committed can be read after the close, by a new instance. */
const dir = mkdtempSync(join(tmpdir(), 'eventrail-pglite-'));
const db = new PGlite(dir);

@Module({
  imports: [
    EventrailModule.forRoot({ redis: process.env.PGLITE_REDIS_URL, prefix: process.env.PGLITE_PREFIX, autoStart: false }),
    EventrailOutboxModule.forRoot({
      connector: pgliteConnector(db),
      ensureSchema: true,
      relay: { enabled: false },
      inbox: { pruneIntervalMs: 0 },
    }),
  ],
})
class PgliteInboxApp {}

/** What a handle did: resolved with its result, or rejected with the error's class and message. */
type Outcome = { resolved: unknown } | { rejected: string; typed: boolean; message: string };

function settle(handled: Promise<unknown>): Promise<Outcome> {
  return handled.then(
    (resolved) => ({ resolved }),
    (error: Error) => ({ rejected: error.name, typed: error instanceof InboxTransactionAbortedError, message: error.message }),
  );
}

async function main(): Promise<void> {
  await db.exec('create table invoices (event_id text not null)');
  const app = await NestFactory.createApplicationContext(PgliteInboxApp, { logger: ['error', 'warn'] });
  const inbox = app.get(EventrailInbox);
  const rows = async (on: PGlite = db): Promise<{ invoices: string[]; inbox: string[] }> => ({
    invoices: (await on.query<{ event_id: string }>('select event_id from invoices order by 1')).rows.map((r) => r.event_id),
    inbox: (await on.query<{ event_id: string }>('select event_id from eventrail_inbox order by 1')).rows.map((r) => r.event_id),
  });

  // A work that swallows a SQL error: the transaction is aborted, and its COMMIT would be a ROLLBACK.
  const caught = await settle(
    inbox.handle<string, Transaction>({ group: 'billing', id: 'caught' }, async (tx) => {
      await tx.query('insert into invoices (event_id) values ($1)', ['caught']);
      await tx.query('select 1 / 0').catch(() => undefined);
      return 'done';
    }),
  );
  const afterCaught = await rows();
  // The same message again, as the consumer's retry sends it: now it commits.
  const retried = await settle(
    inbox.handle<string, Transaction>({ group: 'billing', id: 'caught' }, async (tx) => {
      await tx.query('insert into invoices (event_id) values ($1)', ['caught']);
      return 'done';
    }),
  );

  // The database closed while a handle is in its transaction: PGlite's close waits for the transaction.
  let closing: Promise<void> | undefined;
  const inFlight = await settle(
    inbox.handle<string, Transaction>({ group: 'billing', id: 'in-flight' }, async (tx) => {
      await tx.query('insert into invoices (event_id) values ($1)', ['in-flight']);
      closing = db.close();
      await tx.query('insert into invoices (event_id) values ($1)', ['in-flight']);
      return 'done';
    }),
  );
  // A handle once the database is closing or closed: it fails, and nothing waits forever.
  const afterClose = await settle(inbox.handle({ group: 'billing', id: 'after-close' }, async () => 'done'));
  await closing;
  const closedNext = await settle(inbox.handle({ group: 'billing', id: 'closed' }, async () => 'done'));
  const reopened = new PGlite(dir);
  const committed = await rows(reopened);
  await reopened.close();
  rmSync(dir, { recursive: true, force: true });
  const result = { caught, afterCaught, retried, inFlight, afterClose, closedNext, committed, stats: inbox.stats() };
  await app.close().catch(() => undefined);
  process.send?.({ type: 'result', result }, undefined, {}, () => process.exit(0));
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
