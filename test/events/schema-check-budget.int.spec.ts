import { Injectable, INestApplicationContext } from '@nestjs/common';
import type { StandardSchemaV1 } from '@standard-schema/spec';
import Redis from 'ioredis';
import { defineEvent, EventrailMessage, EventrailPublisher, OnEvent } from '../../lib';
import { EventrailKeys } from '../../lib/redis/keys';
import { decodeDeadLetter } from '../../lib/wire/dead-letter.codec';
import { createApp } from '../support/app';
import { deletePrefix, testRedisUrl, uniquePrefix, waitFor } from '../support/helpers';

const HANDLER_TIMEOUT_MS = 1_000;
const BATCH_TIMEOUT_MS = 200;
const SHUTDOWN_TIMEOUT_MS = 6_000;

/** Answers after 700 ms (a slow remote lookup), or never for `{ hang: true }`. */
const slowSchema: StandardSchemaV1<{ n: number; hang?: boolean }> = {
  '~standard': {
    version: 1,
    vendor: 'test',
    validate: (value) =>
      (value as { hang?: boolean }).hang
        ? new Promise(() => undefined)
        : new Promise((resolve) => setTimeout(() => resolve({ value: value as { n: number } }), 700)),
  },
};
const Slow = defineEvent('audit.slow', slowSchema);
const Hung = defineEvent('audit.hung', slowSchema);

const handled: number[] = [];
const batched: number[] = [];

@Injectable()
class SlowHandler {
  // A check of 700 ms and a handler of 700 ms: together they outlive handlerTimeoutMs (1 s), each alone does not.
  @OnEvent(Slow, { group: 'budget', ordering: 'partition', handlerTimeoutMs: HANDLER_TIMEOUT_MS, maxRetries: 0 })
  async handle(message: EventrailMessage<{ n: number }>): Promise<void> {
    await new Promise((resolve) => setTimeout(resolve, 700));
    handled.push(message.data.n);
  }
}

@Injectable()
class BatchHandler {
  @OnEvent(Hung, { group: 'batch-hung', handlerTimeoutMs: BATCH_TIMEOUT_MS, batch: { maxSize: 50 } })
  handle(messages: Array<EventrailMessage<{ n: number }>>): void {
    batched.push(...messages.map((m) => m.data.n));
  }
}

describe('handlerTimeoutMs bounds the whole attempt, the schema check included', () => {
  const prefix = uniquePrefix('check-budget');
  const keys = new EventrailKeys(prefix, 1);
  let redis: Redis;
  let app: INestApplicationContext | undefined;

  beforeAll(() => (redis = new Redis(testRedisUrl())));
  afterEach(async () => {
    await app?.close();
    app = undefined;
  });
  afterAll(async () => {
    await deletePrefix(redis, prefix);
    redis.disconnect();
  });

  it('an attempt whose check and handler together outlive handlerTimeoutMs times out and, with maxRetries 0, is dead-lettered', async () => {
    app = await createApp({ prefix, partitions: 1 }, [SlowHandler]);
    await app.get(EventrailPublisher).publish('audit.slow', { n: 1 }, { key: 'k' });
    const letters = await waitFor(
      async () => {
        const found = (await redis.xrange(keys.deadLetters('budget'), '-', '+')).map(([id, f]) => decodeDeadLetter(id, f));
        return found.length > 0 || handled.length > 0 ? found : undefined;
      },
      () => 'neither handled nor dead-lettered',
      10_000,
    );
    expect({ handled, letters: letters.map((l) => l.error.name) }).toEqual({ handled: [], letters: ['HandlerTimeoutError'] });
  });

  it('a batch of 50 hanging checks shares one budget: all are dead-lettered within it and close() does not wait shutdownTimeoutMs', async () => {
    const seeder = await createApp({ prefix, partitions: 1 });
    await seeder
      .get(EventrailPublisher)
      .publishMany(Array.from({ length: 50 }, (_, n) => ({ event: 'audit.hung', data: { n, hang: true }, key: 'k' })));
    await seeder.close();
    app = await createApp({ prefix, partitions: 1, consumer: { shutdownTimeoutMs: SHUTDOWN_TIMEOUT_MS } }, [BatchHandler]);
    await waitFor(async () => (await redis.xlen(keys.deadLetters('batch-hung'))) > 0, 'a first dead letter', 10_000);
    const closing = performance.now();
    await app.close();
    app = undefined;
    const tookMs = performance.now() - closing;
    // Checked one after another, each with the whole budget, the 50 checks took 10 s and close() sat out shutdownTimeoutMs.
    expect(tookMs).toBeLessThan(SHUTDOWN_TIMEOUT_MS / 2);
    expect(await redis.xlen(keys.deadLetters('batch-hung'))).toBe(50);
    expect(batched).toEqual([]);
  }, 30_000);
});
