import { Injectable, INestApplicationContext } from '@nestjs/common';
import type { StandardSchemaV1 } from '@standard-schema/spec';
import Redis from 'ioredis';
import { defineEvent, EventrailConsumers, EventrailMessage, EventrailPublisher, OnEvent } from '../../lib';
import { EventrailKeys } from '../../lib/redis/keys';
import { decodeDeadLetter } from '../../lib/wire/dead-letter.codec';
import { createApp } from '../support/app';
import { deletePrefix, testRedisUrl, uniquePrefix } from '../support/helpers';

/** A schema whose check never settles on `{ hang: true }` (an async refinement waiting on something that never answers). */
const hangingSchema: StandardSchemaV1<{ hang?: boolean; n: number }> = {
  '~standard': {
    version: 1,
    vendor: 'test',
    validate: (value) =>
      (value as { hang?: boolean }).hang ? new Promise(() => undefined) : Promise.resolve({ value: value as { n: number } }),
  },
};
const Checked = defineEvent('order.checked', hangingSchema);
const HANDLER_TIMEOUT_MS = 300;
const SHUTDOWN_TIMEOUT_MS = 20_000;

const handled: Record<string, number[]> = { single: [], batch: [] };

@Injectable()
class Handlers {
  @OnEvent(Checked, { group: 'single', handlerTimeoutMs: HANDLER_TIMEOUT_MS })
  one(message: EventrailMessage<{ n: number }>): void {
    handled.single.push(message.data.n);
  }

  @OnEvent(Checked, { group: 'batch', handlerTimeoutMs: HANDLER_TIMEOUT_MS, batch: { maxSize: 10 } })
  many(messages: Array<EventrailMessage<{ n: number }>>): void {
    handled.batch.push(...messages.map((m) => m.data.n));
  }
}

describe('a consumer-side schema check that never settles', () => {
  const prefix = uniquePrefix('check-timeout');
  const keys = new EventrailKeys(prefix, 1);
  let redis: Redis;
  let app: INestApplicationContext | undefined;

  beforeAll(() => (redis = new Redis(testRedisUrl())));
  afterAll(async () => {
    await app?.close();
    await deletePrefix(redis, prefix);
    redis.disconnect();
  });

  it('counts against handlerTimeoutMs: the message is dead-lettered, the key goes on, and close() does not wait shutdownTimeoutMs', async () => {
    app = await createApp({ prefix, partitions: 1, consumer: { shutdownTimeoutMs: SHUTDOWN_TIMEOUT_MS } }, [Handlers]);
    const publisher = app.get(EventrailPublisher);
    // The publisher has no schema for a plain name, so the hanging data reaches the log.
    await publisher.publish('order.checked', { hang: true, n: 1 }, { key: 'order-1' });
    await publisher.publish(Checked, { n: 2 }, { key: 'order-1' });
    await app.get(EventrailConsumers).settled({ timeoutMs: 15_000 });

    for (const group of ['single', 'batch']) {
      expect({ group, handled: handled[group] }).toEqual({ group, handled: [2] });
      const letters = (await redis.xrange(keys.deadLetters(group), '-', '+')).map(([id, fields]) => decodeDeadLetter(id, fields));
      expect(letters).toHaveLength(1);
      expect([letters[0].reason, letters[0].error.name]).toEqual(['invalid', 'EventValidationError']);
      expect(letters[0].error.message).toMatch(/order\.checked.*the schema check did not settle within handlerTimeoutMs \(300 ms\)/);
    }

    // Nothing is left running: the close is quick (a hung check would hold it for shutdownTimeoutMs).
    const closing = performance.now();
    await app.close();
    app = undefined;
    expect(performance.now() - closing).toBeLessThan(5_000);
  });
});
