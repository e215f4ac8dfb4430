/**
 * The outbox on embedded PGlite, in a process of its own (PGlite does not load
 * inside Jest's VM): publish in a transaction and roll one back, let the relay
 * append, handle through the inbox, redeliver everything, and report what was
 * seen to the parent over IPC. Env: PGLITE_REDIS_URL, PGLITE_PREFIX.
 */
import 'reflect-metadata';
import { PGlite, Transaction } from '@electric-sql/pglite';
import { Injectable, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { EventrailAdmin, EventrailConsumers, EventrailMessage, EventrailModule, OnEvent } from '../../lib';
import { EventrailInbox, EventrailOutbox, EventrailOutboxModule, EventrailOutboxRelay, pgliteConnector } from '../../lib/outbox';

const db = new PGlite();
let handlerCalls = 0;

@Injectable()
class Billing {
  constructor(private readonly inbox: EventrailInbox) {}

  @OnEvent('order.placed', 'billing')
  async bill(message: EventrailMessage<{ order: number }>): Promise<void> {
    handlerCalls++;
    await this.inbox.handle<void, Transaction>(message, async (tx) => {
      await tx.query('insert into invoices (order_id) values ($1)', [message.data.order]);
    });
  }
}

@Module({
  imports: [
    EventrailModule.forRoot({ redis: process.env.PGLITE_REDIS_URL, prefix: process.env.PGLITE_PREFIX, dedupWindowMs: 60_000 }),
    EventrailOutboxModule.forRoot({ connector: pgliteConnector(db), ensureSchema: true, relay: { pollIntervalMs: 60_000 } }),
  ],
  providers: [Billing],
})
class PgliteApp {}

async function until(predicate: () => Promise<boolean> | boolean, what: string): Promise<void> {
  const deadline = Date.now() + 20_000;
  while (!(await predicate())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

async function main(): Promise<void> {
  await db.exec('create table invoices (order_id int not null)');
  const app = await NestFactory.createApplicationContext(PgliteApp, { logger: ['error', 'warn'] });
  await app.get(EventrailConsumers).whenRunning();
  const outbox = app.get(EventrailOutbox);
  const count = async (sql: string): Promise<number> => Number((await db.query<{ n: number }>(sql)).rows[0].n);
  for (const order of [1, 2, 3]) await db.transaction((tx) => outbox.publish(tx, 'order.placed', { order }, { key: 'customer' }));
  await db
    .transaction(async (tx) => {
      await outbox.publish(tx, 'order.placed', { order: 99 }, { key: 'customer' });
      throw new Error('rolled back');
    })
    .catch(() => undefined);
  // The relay polls only once a minute here: these arrive through NOTIFY.
  await until(async () => (await count('select count(*)::int as n from invoices')) === 3, 'three invoices');
  const outboxRows = await count('select count(*)::int as n from eventrail_outbox');
  await app.get(EventrailAdmin).resetOffsets('billing', 'start', { force: true });
  await until(() => app.get(EventrailInbox).stats().skippedDuplicates === 3, 'three redeliveries skipped');
  const result = {
    invoices: (await db.query<{ order_id: number }>('select order_id from invoices order by 1')).rows.map((row) => row.order_id),
    outboxRows,
    handlerCalls,
    inbox: app.get(EventrailInbox).stats(),
    relay: app.get(EventrailOutboxRelay).stats(),
  };
  await app.close();
  await db.close();
  process.send?.({ type: 'result', result }, undefined, {}, () => process.exit(0));
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
