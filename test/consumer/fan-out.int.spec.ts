import { Injectable, INestApplicationContext } from '@nestjs/common';
import Redis from 'ioredis';
import { EventrailMessage, EventrailPublisher, OnEvent } from '../../lib';
import { createApp } from '../support/app';
import { deletePrefix, testRedisUrl, uniquePrefix, waitFor } from '../support/helpers';

const seen: Record<string, string[]> = { mailer: [], ledger: [], audit: [] };

@Injectable()
class Mailer {
  @OnEvent('payment.completed', 'mailer')
  handle(message: EventrailMessage<{ n: number }>): void {
    seen.mailer.push(message.id);
  }
}

@Injectable()
class Ledger {
  @OnEvent(['payment.completed', 'payment.refunded'], { group: 'ledger', concurrency: 4 })
  async handle(message: EventrailMessage<{ n: number }>): Promise<void> {
    seen.ledger.push(message.id);
  }
}

@Injectable()
class Audit {
  @OnEvent('payment.completed', 'audit')
  @OnEvent('payment.refunded', 'audit')
  handle(message: EventrailMessage): void {
    seen.audit.push(message.id);
  }
}

describe('fan-out to groups', () => {
  const prefix = uniquePrefix('fanout');
  let app: INestApplicationContext;
  let redis: Redis;

  beforeAll(async () => {
    redis = new Redis(testRedisUrl());
    app = await createApp({ prefix, partitions: 4 }, [Mailer, Ledger, Audit]);
  });

  afterAll(async () => {
    await app?.close();
    await deletePrefix(redis, prefix);
    redis.disconnect();
  });

  it('delivers every event once to each group that handles it', async () => {
    const publisher = app.get(EventrailPublisher);
    const completed = await publisher.publishMany(
      Array.from({ length: 300 }, (_, n) => ({ event: 'payment.completed', data: { n }, key: `k${n % 17}` })),
    );
    const refunded = await publisher.publish('payment.refunded', { n: -1 }, { key: 'k1' });
    const all = [...completed.map((r) => r.id), refunded.id];

    await waitFor(
      () => seen.mailer.length >= 300 && seen.ledger.length >= 301 && seen.audit.length >= 301,
      () => JSON.stringify({ m: seen.mailer.length, l: seen.ledger.length, a: seen.audit.length }),
    );
    expect([...seen.mailer].sort()).toEqual(completed.map((r) => r.id).sort());
    expect([...seen.ledger].sort()).toEqual([...all].sort());
    expect([...seen.audit].sort()).toEqual([...all].sort());
  });
});
