import { randomBytes } from 'node:crypto';
import { INestApplicationContext, Provider } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import Redis from 'ioredis';
import { EventrailModule, EventrailModuleOptions } from '../../lib';
import { EventrailOutboxModule, EventrailOutboxModuleOptions } from '../../lib/outbox';
import { testRedisUrl } from './helpers';

/** Table names of their own for one test: a relay drains its whole table, so tests never share one. */
export function uniqueTables(): { outboxTable: string; inboxTable: string } {
  const id = randomBytes(4).toString('hex');
  return { outboxTable: `outbox_${id}`, inboxTable: `inbox_${id}` };
}

/** A Nest app with eventrail (dedup on, as the relay needs) and the outbox module. */
export async function createOutboxApp(
  eventrail: EventrailModuleOptions,
  outbox: EventrailOutboxModuleOptions,
  providers: Provider[] = [],
): Promise<INestApplicationContext> {
  const moduleRef = await Test.createTestingModule({
    imports: [
      EventrailModule.forRoot({ redis: testRedisUrl(), dedupWindowMs: 600_000, ...eventrail }),
      EventrailOutboxModule.forRoot({ ensureSchema: true, ...outbox }),
    ],
    providers,
  }).compile();
  return moduleRef.init();
}

/** Every entry of one partition's stream, decoded enough to check ids, keys and order. */
export async function logEntries(redis: Redis, prefix: string, partition = 0): Promise<Array<{ id: string; key?: string; data: unknown }>> {
  const entries = await redis.xrange(`{${prefix}:${partition}}:log`, '-', '+');
  return entries.map(([, fields]) => {
    const map = new Map<string, string>();
    for (let i = 0; i < fields.length; i += 2) map.set(fields[i], fields[i + 1]);
    return { id: map.get('id') as string, key: map.get('key'), data: JSON.parse(map.get('data') as string) as unknown };
  });
}
