import { ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import Redis from 'ioredis';
import { Pool, PoolClient } from 'pg';
import { EventrailOutbox, pgConnector } from '../../lib/outbox';
import { killQuietly, spawnTypeScript } from '../support/child-processes';
import { deletePrefix, testRedisUrl, uniquePrefix, waitFor } from '../support/helpers';
import { createOutboxApp, logEntries, uniqueTables } from '../support/outbox';
import { PostgresServer, startPostgres } from '../support/postgres';

const RELAY_FILE = join(__dirname, '..', 'support', 'outbox-relay-process.ts');
const PARTITIONS = 4;
const KEYS = 24;
const KILLS = 2;

interface RelayChild {
  child: ChildProcess;
  output: string[];
  active: Promise<void>;
  exited: Promise<void>;
}

/**
 * Relay processes are SIGKILLed by pid while producers keep committing rows:
 * every row reaches the log exactly once (the successor's repeats are absorbed
 * by dedup) and each key's events are in the log in the order the rows committed.
 */
describe('outbox relay crashes', () => {
  let server: PostgresServer;
  let databaseUrl: string;
  let pool: Pool;
  let redis: Redis;
  let prefix: string;
  const children: RelayChild[] = [];

  const spawnRelay = (table: string): RelayChild => {
    const child = spawnTypeScript(RELAY_FILE, {
      env: {
        RELAY_REDIS_URL: testRedisUrl(),
        RELAY_DATABASE_URL: databaseUrl,
        RELAY_PREFIX: prefix,
        RELAY_PARTITIONS: String(PARTITIONS),
        RELAY_OUTBOX_TABLE: table,
        RELAY_BATCH_SIZE: '25',
        // One batch in ten appended twice, so dedup surely has repeats to absorb, not only the kills' chance ones.
        RELAY_DOUBLE_SEND_RATE: '0.1',
      },
    });
    const output: string[] = [];
    child.stdout?.on('data', (chunk: Buffer) => output.push(chunk.toString()));
    child.stderr?.on('data', (chunk: Buffer) => output.push(chunk.toString()));
    const active = new Promise<void>((resolve) => child.on('message', (m: { type: string }) => m.type === 'active' && resolve()));
    const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
    const relay = { child, output, active, exited };
    children.push(relay);
    return relay;
  };

  beforeAll(async () => {
    server = await startPostgres();
    databaseUrl = await server.createDatabase();
    pool = new Pool({ connectionString: databaseUrl, max: 10 });
    redis = new Redis(testRedisUrl());
  });
  afterAll(async () => {
    for (const relay of children) killQuietly(relay.child.pid, 'SIGKILL');
    await Promise.all(children.map((relay) => relay.exited));
    await pool?.end();
    redis?.disconnect();
    await server?.stop();
  });

  it('appends every row once, in per-key commit order, across SIGKILLs of the active relay', async () => {
    prefix = uniquePrefix('relaykill');
    const tables = uniqueTables();
    // The producer's app: outbox only, no relay of its own; it creates the schema.
    const producer = await createOutboxApp(
      { prefix, partitions: PARTITIONS, autoStart: false },
      { connector: pgConnector(pool), ...tables, relay: { enabled: false }, inbox: { pruneIntervalMs: 0 } },
    );
    try {
      const outbox = producer.get(EventrailOutbox);
      const committed = new Map<string, string[]>(); // key -> event ids in commit order (row id order under the key lock)
      const rowIds = new Map<string, Array<{ rowId: bigint; id: string }>>();
      let producing = true;
      let seq = 0;
      const produce = async (): Promise<void> => {
        while (producing) {
          const client: PoolClient = await pool.connect();
          try {
            await client.query('begin');
            const batch = Array.from({ length: 5 }, () => {
              const n = seq++;
              return { event: 'ride.booked', data: { n }, key: `user-${(n * 7) % KEYS}` };
            });
            const records = await outbox.publishMany(client, batch);
            await client.query('commit');
            records.forEach((record, i) => {
              const list = rowIds.get(batch[i].key) ?? [];
              list.push({ rowId: BigInt(record.rowId), id: record.id });
              rowIds.set(batch[i].key, list);
            });
          } finally {
            client.release();
          }
        }
      };
      const producers = [produce(), produce(), produce()];

      const first = spawnRelay(tables.outboxTable);
      const second = spawnRelay(tables.outboxTable);
      const appended = async (): Promise<number> => {
        let total = 0;
        for (let p = 0; p < PARTITIONS; p++) total += await redis.xlen(`{${prefix}:${p}}:log`);
        return total;
      };
      // Kill whichever is active once it has appended something, twice over, replacing each.
      let standby = [first, second];
      for (let kill = 0; kill < KILLS; kill++) {
        const victim = await Promise.race(standby.map((relay) => relay.active.then(() => relay)));
        const before = await appended();
        await waitFor(async () => (await appended()) >= before + 100, 'the active relay appends');
        expect(killQuietly(victim.child.pid, 'SIGKILL')).toBe(true);
        await victim.exited;
        standby = [...standby.filter((relay) => relay !== victim), spawnRelay(tables.outboxTable)];
      }
      const survivor = await Promise.race(standby.map((relay) => relay.active.then(() => relay)));
      producing = false;
      await Promise.all(producers);
      await waitFor(
        async () => Number((await pool.query(`select count(*) as n from ${tables.outboxTable}`)).rows[0].n) === 0,
        () => `the relays drained the outbox\n${children.map((c) => c.output.join('')).join('\n---\n')}`,
        60_000,
      );

      for (const [key, list] of rowIds)
        committed.set(
          key,
          [...list].sort((a, b) => (a.rowId < b.rowId ? -1 : 1)).map((r) => r.id),
        );
      const inLog = new Map<string, string[]>();
      let total = 0;
      for (let p = 0; p < PARTITIONS; p++) {
        for (const entry of await logEntries(redis, prefix, p)) {
          inLog.set(entry.key as string, [...(inLog.get(entry.key as string) ?? []), entry.id]);
          total++;
        }
      }
      expect(total).toBe(seq); // exactly once: no loss, no duplicate entry
      expect(inLog).toEqual(committed); // per-key order = commit order
      const stats = await new Promise<{ relayed: number; duplicates: number }>((resolve) => {
        survivor.child.on(
          'message',
          (m: { type: string; stats: { relayed: number; duplicates: number } }) => m.type === 'stats' && resolve(m.stats),
        );
        survivor.child.send({ cmd: 'stats' });
      });
      expect(stats.duplicates).toBeGreaterThan(0);
      console.log(
        `outbox relay crashes: ${seq} rows, ${KILLS} SIGKILLs of the active relay, ${total} log entries; ` +
          `the last relay appended ${stats.relayed} rows, ${stats.duplicates} of them already in the log (double sends and the predecessor's batch, absorbed by dedup)`,
      );
    } finally {
      await producer.close();
      await deletePrefix(redis, prefix);
    }
  }, 120_000);
});
