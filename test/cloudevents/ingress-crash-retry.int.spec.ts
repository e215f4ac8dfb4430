import { INestApplication } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import Redis from 'ioredis';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { EventrailCloudEventsModule, EventrailModule } from '../../lib';
import { EventrailKeys } from '../../lib/redis/keys';
import { uniquePrefix, waitFor } from '../support/helpers';
import { startRedisServer, type RedisServer } from '../support/redis-server';

const TOKEN = 'crash-secret-1';
const PARTITIONS = 8;
const EVENTS = 4000;
const BATCH = 'application/cloudevents-batch+json';

// A sender's retry after a real crash: redis-server (AOF, fsync always, so what it answered survives) is SIGKILLed
// by pid while a batch is being appended, restarted on the same port and directory, and the sender retries until
// it gets 202, then once more as a sender that missed that answer would. Every CloudEvent is in the log once.
describe.each(['express', 'fastify'] as const)('CloudEvents ingress: a batch cut by a Redis crash, retried (%s)', (platform) => {
  const dir = mkdtempSync(join(tmpdir(), 'ce-crash-'));
  const args = ['--appendonly', 'yes', '--appendfsync', 'always', '--dir', dir];
  let server: RedisServer | undefined;
  let app: INestApplication | undefined;

  afterAll(async () => {
    await app?.close();
    await server?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  async function post(port: number, body: string): Promise<number> {
    try {
      const response = await fetch(`http://127.0.0.1:${port}/cloudevents`, {
        method: 'POST',
        headers: { authorization: `Bearer ${TOKEN}`, 'content-type': BATCH },
        body,
      });
      await response.text();
      return response.status;
    } catch {
      return -1; // no answer at all: a sender retries that too
    }
  }

  it('each CloudEvent is appended exactly once across the cut request and its retries', async () => {
    server = await startRedisServer(undefined, args);
    const prefix = uniquePrefix('ce-crash');
    const moduleRef = await Test.createTestingModule({
      imports: [
        EventrailModule.forRoot({ redis: server.url, prefix, partitions: PARTITIONS, maxPayloadBytes: 16 * 1024 * 1024 }),
        EventrailCloudEventsModule.register({ auth: { token: TOKEN }, maxBatchSize: 10_000 }),
      ],
    }).compile();
    app =
      platform === 'fastify'
        ? moduleRef.createNestApplication(new FastifyAdapter(), { logger: false })
        : moduleRef.createNestApplication({ logger: false });
    await app.listen(0, '127.0.0.1');
    const port = (app.getHttpServer().address() as { port: number }).port;
    const keys = new EventrailKeys(prefix, PARTITIONS);
    const entriesNow = async (url: string): Promise<number> => {
      const probe = new Redis(url, { maxRetriesPerRequest: 0, retryStrategy: () => null });
      try {
        let n = 0;
        for (let p = 0; p < PARTITIONS; p++) n += await probe.xlen(keys.stream(p));
        return n;
      } finally {
        probe.disconnect();
      }
    };
    // The kill has to land while the batch is being appended: the server is frozen (SIGSTOP) as soon as the watcher
    // sees the first entries, then killed. Should the rest of the batch still go in between the watcher's read and
    // the freeze, that round proves nothing, and the scenario runs again with new CloudEvent ids (the earlier
    // round's entries stay in the log and are not counted).
    let batch: Array<{ id: string }> = [];
    let body = '';
    let before = 0;
    let statuses: number[] = [];
    for (let round = 0; round < 20; round++) {
      batch = Array.from({ length: EVENTS }, (_, i) => ({
        specversion: '1.0',
        id: `crash-${round}-${i}`,
        source: 'urn:crash',
        type: 'crash.tested',
        subject: `key-${i % 37}`,
        data: { i, pad: 'p'.repeat(800) },
      }));
      body = JSON.stringify(batch);
      const start = await entriesNow(server.url);
      const watcher = new Redis(server.url, { maxRetriesPerRequest: 0, retryStrategy: () => null });
      const cut = post(port, body);
      const pid = server.pid;
      await waitFor(
        async () => {
          const pipeline = watcher.pipeline();
          for (let p = 0; p < PARTITIONS; p++) pipeline.xlen(keys.stream(p));
          const lengths = (await pipeline.exec()) ?? [];
          before = lengths.reduce((sum, [, n]) => sum + Number(n), -start);
          // Frozen at once, so the rest of the batch cannot go in before the kill.
          if (before > 0) process.kill(pid, 'SIGSTOP');
          return before > 0;
        },
        'the first entries of the batch',
        20_000,
        1,
      );
      await server.stop('SIGKILL');
      watcher.disconnect();
      statuses = [await cut];
      server = await startRedisServer(server.port, args);
      if (statuses[0] !== 202 && before < EVENTS) break;
      // The app reconnects to the restarted server before the next round starts.
      const warm = JSON.stringify([{ specversion: '1.0', id: `warm-${round}`, source: 'urn:crash', type: 'crash.tested' }]);
      await waitFor(async () => (await post(port, warm)) === 202, 'the app publishing again after the restart', 30_000, 100);
    }
    await waitFor(
      async () => {
        statuses.push(await post(port, body));
        return statuses[statuses.length - 1] === 202;
      },
      () => `a 202 for the retried batch (answers so far: ${statuses.join(', ')})`,
      30_000,
      250,
    );
    statuses.push(await post(port, body));
    const ids = new Set(batch.map((e) => e.id));
    const reader = new Redis(server.url);
    const counts = new Map<string, number>();
    try {
      for (let p = 0; p < PARTITIONS; p++) {
        for (const [, fields] of await reader.xrange(keys.stream(p), '-', '+')) {
          const headers = JSON.parse(fields[fields.indexOf('headers') + 1]) as Record<string, string>;
          if (!ids.has(headers['ce-id'])) continue;
          counts.set(headers['ce-id'], (counts.get(headers['ce-id']) ?? 0) + 1);
        }
      }
    } finally {
      reader.disconnect();
    }
    // The crash really cut the batch: some entries were in before the kill, and the first request did not succeed.
    expect({ cutPartway: before > 0 && before < EVENTS, firstStatus: statuses[0] === 202 ? 202 : 'failed' }).toEqual({
      cutPartway: true,
      firstStatus: 'failed',
    });
    expect({
      last: statuses[statuses.length - 1],
      entries: [...counts.values()].reduce((a, b) => a + b, 0),
      twice: [...counts].filter(([, n]) => n > 1).map(([id]) => id),
      missing: batch.filter((e) => !counts.has(e.id)).map((e) => e.id),
    }).toEqual({ last: 202, entries: EVENTS, twice: [], missing: [] });
  }, 240_000); // up to 20 rounds on a loaded host, where the batch often gets through whole before the kill (8 were not always enough)
});
