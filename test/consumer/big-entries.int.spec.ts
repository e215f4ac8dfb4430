import { Injectable, INestApplicationContext, Logger } from '@nestjs/common';
import Redis from 'ioredis';
import { EventrailConsumers, EventrailPublisher, OnEvent, RedisFullError } from '../../lib';
import { EventrailKeys } from '../../lib/redis/keys';
import { createApp } from '../support/app';
import { uniquePrefix, waitFor } from '../support/helpers';
import { RedisServer, startRedisServer } from '../support/redis-server';

const MIB = 1024 * 1024;
const BIG = { blob: 'x'.repeat(MIB) };

const handled = new Map<string, number>();
const bump = (group: string): void => void handled.set(group, (handled.get(group) ?? 0) + 1);
const count = (group: string): number => handled.get(group) ?? 0;

@Injectable()
class Archiver {
  @OnEvent('big', 'archiver')
  handle(): void {
    bump('archiver');
  }
}

@Injectable()
class Ledger {
  @OnEvent('big', 'ledger')
  handle(): void {
    bump('ledger');
  }
}

@Injectable()
class Mailer {
  @OnEvent('big', 'mailer')
  handle(): void {
    bump('mailer');
  }
}

@Injectable()
class Receiver {
  @OnEvent('big', 'receiver')
  handle(): void {
    bump('receiver');
  }
}

@Injectable()
class Shifter {
  @OnEvent(['small', 'big'], 'shifter')
  handle(): void {
    bump('shifter');
  }
}

@Injectable()
class Stuck {
  @OnEvent(['small', 'big'], 'stuck')
  handle(): void {
    bump('stuck');
  }
}

/** `INFO memory` as numbers. */
async function memory(redis: Redis): Promise<Record<string, number>> {
  const info = await redis.info('memory');
  return Object.fromEntries(
    info
      .split('\r\n')
      .map((line) => line.split(':'))
      .filter(([, value]) => value !== undefined && /^\d+$/.test(value))
      .map(([key, value]) => [key, Number(value)]),
  );
}

const mib = (bytes: number): string => `${(bytes / MIB).toFixed(0)} MiB`;

/**
 * Entries of about 1 MiB: a read's reply is buffered whole in Redis, so a
 * read of `batchSize` of them (200 MiB) is closed by a client output buffer
 * limit, or pushes Redis past `maxmemory`. Reads are bounded by bytes
 * (`maxReadBytes`), whatever the entries' size.
 */
describe('big entries', () => {
  describe('under a normal-client output buffer limit of 32 MB', () => {
    let server: RedisServer;
    let redis: Redis;
    const apps: INestApplicationContext[] = [];

    beforeAll(async () => {
      server = await startRedisServer(undefined, ['--client-output-buffer-limit', 'normal 32mb 16mb 60']);
      redis = new Redis(server.url);
    });
    afterEach(async () => {
      jest.restoreAllMocks();
      for (const app of apps.splice(0)) await app.close();
    });
    afterAll(async () => {
      redis?.disconnect();
      await server?.stop();
    });

    it('handles 60 entries of 1 MiB with the default batchSize', async () => {
      const app = await createApp({ redis: server.url, maxPayloadBytes: 64 * MIB, prefix: uniquePrefix('big'), autoStart: false }, [
        Archiver,
      ]);
      apps.push(app);
      const publisher = app.get(EventrailPublisher);
      for (let i = 0; i < 60; i++) await publisher.publish('big', BIG);
      const started = performance.now();
      await app.get(EventrailConsumers).start();
      await waitFor(
        () => count('archiver') === 60,
        () => `${count('archiver')} of 60 handled`,
        20_000,
      );
      console.log(`60 entries of 1 MiB under a 32 MB output buffer limit: handled in ${(performance.now() - started).toFixed(0)} ms`);
    });

    it('with maxReadBytes above the limit, reads that Redis cuts are made smaller, and that is said once', async () => {
      const warn = jest.spyOn(Logger.prototype, 'warn');
      const prefix = uniquePrefix('cut');
      const options = { redis: server.url, maxPayloadBytes: 64 * MIB, prefix, autoStart: false };
      // Entries eventrail appends over 16 KiB are indexed and read one at a time, which no limit cuts. Entries of a
      // log written before eventrail indexed them (appended raw here, before the app first starts) are read by the
      // byte-counting script, which a 64 MiB maxReadBytes lets bring 32 of them.
      const stream = new EventrailKeys(prefix, 1).stream(0);
      for (let i = 0; i < 60; i++) await redis.xadd(stream, '*', 'event', 'big', 'data', JSON.stringify(BIG));
      const app = await createApp({ ...options, consumer: { maxReadBytes: 64 * MIB } }, [Shifter]);
      apps.push(app);
      await app.get(EventrailConsumers).start();
      await waitFor(
        () => count('shifter') === 60,
        () => `${count('shifter')} of 60 handled`,
        20_000,
      );
      const said = warn.mock.calls.map(([message]) => String(message)).filter((m) => /closed the connection during a read/.test(m));
      expect(said).toHaveLength(1);
      expect(said[0]).toMatch(/partition 0/);
      expect(said[0]).toMatch(/MiB/);
    });

    it('a partition of small entries followed by 40 entries of 1 MiB: the read that reaches them is cut, and the next ones ask for fewer', async () => {
      const options = { redis: server.url, maxPayloadBytes: 64 * MIB, prefix: uniquePrefix('shift'), autoStart: false };
      const app = await createApp(options, [Receiver]);
      apps.push(app);
      const publisher = app.get(EventrailPublisher);
      for (let i = 0; i < 5; i++) await publisher.publish('big', { i });
      for (let i = 0; i < 40; i++) await publisher.publish('big', BIG);
      // The first entry says a few dozen bytes an entry: the rest of the first batch is asked for whole (40 MiB).
      await app.get(EventrailConsumers).start();
      await waitFor(
        () => count('receiver') === 45,
        () => `${count('receiver')} of 45 handled`,
        20_000,
      );
    });

    it('an entry bigger than the limit is named in a logged error, with its size, and the partition waits at it', async () => {
      const error = jest.spyOn(Logger.prototype, 'error');
      const app = await createApp({ redis: server.url, maxPayloadBytes: 64 * MIB, prefix: uniquePrefix('stuck') }, [Stuck]);
      apps.push(app);
      const publisher = app.get(EventrailPublisher);
      await publisher.publish('small', { i: 0 });
      const { offset } = await publisher.publish('big', { blob: 'x'.repeat(40 * MIB) });
      await publisher.publish('small', { i: 1 });
      const message = await waitFor(
        () => error.mock.calls.map(([m]) => String(m)).find((m) => m.includes(offset)),
        'an error naming the entry too big to read',
        40_000,
      );
      expect(message).toMatch(/partition 0/);
      expect(message).toMatch(/40\.0 MiB/);
      expect(count('stuck')).toBe(1);
    });
  });

  describe('under maxmemory', () => {
    let server: RedisServer;
    let redis: Redis;
    let app: INestApplicationContext | undefined;

    beforeAll(async () => {
      server = await startRedisServer(undefined, ['--maxmemory-policy', 'noeviction']);
      redis = new Redis(server.url);
    });
    afterAll(async () => {
      await app?.close();
      redis?.disconnect();
      await server?.stop();
    });

    it('two groups catching up on 60 entries of 1 MiB stay under maxmemory = 1.3 x the log, and no small publish is refused', async () => {
      app = await createApp({ redis: server.url, maxPayloadBytes: 64 * MIB, prefix: uniquePrefix('full'), autoStart: false }, [
        Ledger,
        Mailer,
      ]);
      const publisher = app.get(EventrailPublisher);
      for (let i = 0; i < 60; i++) await publisher.publish('big', BIG);
      const before = await memory(redis);
      const limit = Math.round(1.3 * before.used_memory);
      await redis.config('SET', 'maxmemory', String(limit));
      await redis.config('RESETSTAT');

      let refused = 0;
      let published = 0;
      let highest = 0;
      let catching = true;
      const smalls = (async () => {
        while (catching) {
          await publisher.publish('small', { n: published }).then(
            () => published++,
            (error: unknown) => {
              if (!(error instanceof RedisFullError)) throw error;
              refused++;
            },
          );
          highest = Math.max(highest, (await memory(redis)).used_memory);
        }
      })();
      const started = performance.now();
      await app.get(EventrailConsumers).start();
      try {
        await waitFor(
          () => count('ledger') >= 60 && count('mailer') >= 60,
          () => `ledger ${count('ledger')}, mailer ${count('mailer')} of 60 handled`,
          30_000,
        );
      } finally {
        catching = false;
        await smalls;
      }
      const peak = (await memory(redis)).used_memory_peak;
      console.log(
        `two groups over 60 entries of 1 MiB in ${(performance.now() - started).toFixed(0)} ms: log ${mib(before.used_memory)}, ` +
          `maxmemory ${mib(limit)}, used_memory_peak ${mib(peak)} (highest sampled ${mib(highest)}), ` +
          `${refused} of ${refused + published} small publishes refused`,
      );
      expect(refused).toBe(0);
      expect(peak).toBeLessThan(limit);
    });
  });
});
