import { ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import Redis from 'ioredis';
import { Pool } from 'pg';
import { EventrailOutbox, pgConnector } from '../../lib/outbox';
import { killQuietly, spawnTypeScript } from '../support/child-processes';
import { uniquePrefix, waitFor } from '../support/helpers';
import { createOutboxApp } from '../support/outbox';
import { PostgresServer, startPostgres } from '../support/postgres';
import { seededRandom } from '../support/seeded-random';
import { DurableRedis } from '../faults/support/durable-redis';

const SUPPORT = join(__dirname, '..', 'support');
const PARTITIONS = 4;
const USERS = 20;
const RIDES = 300;
/** Consumer processes that may SIGKILL themselves (after their DB commit, before the offset commit); later ones do not, so the run ends. */
const KILLING_CONSUMERS = 3;

interface Child {
  child: ChildProcess;
  output: string[];
  exited: Promise<void>;
  ready: Promise<void>;
  active: Promise<void>;
}

/**
 * The unified-log experiment end to end: this process books rides in PostgreSQL
 * transactions (a ride row and an outbox row), relay processes append them
 * (10% of their batches twice) and are SIGKILLed at random, consumer processes
 * add them to two groups' totals through the inbox and SIGKILL themselves after
 * their database commit and before their offset commit, and Redis is SIGKILLed
 * and restarted from its AOF. At the end both groups' totals equal the booked
 * totals exactly, and the inbox shows the redeliveries it absorbed.
 */
describe('unified log: outbox, relay, inbox under faults', () => {
  let server: PostgresServer;
  let databaseUrl: string;
  let pool: Pool;
  let redis: DurableRedis;
  const children: Child[] = [];
  const seed = Number(process.env.OUTBOX_CHAOS_SEED ?? Date.now() % 100_000);
  const random = seededRandom(seed);

  const spawn = (file: string, env: Record<string, string>): Child => {
    const child = spawnTypeScript(join(SUPPORT, file), { env });
    const output: string[] = [];
    child.stdout?.on('data', (chunk: Buffer) => output.push(chunk.toString()));
    child.stderr?.on('data', (chunk: Buffer) => output.push(chunk.toString()));
    const on = (type: string) => new Promise<void>((resolve) => child.on('message', (m: { type: string }) => m.type === type && resolve()));
    const record: Child = {
      child,
      output,
      exited: new Promise<void>((resolve) => child.once('exit', () => resolve())),
      ready: on('ready'),
      active: on('active'),
    };
    children.push(record);
    return record;
  };

  beforeAll(async () => {
    [server, redis] = await Promise.all([startPostgres(), DurableRedis.start()]);
    databaseUrl = await server.createDatabase();
    pool = new Pool({ connectionString: databaseUrl, max: 10 });
    await pool.query(`
      create table rides (id serial primary key, user_id text not null, distance integer not null);
      create table distance_totals (user_id text primary key, km bigint not null);
      create table ride_counts (user_id text primary key, rides bigint not null)`);
  });
  afterAll(async () => {
    for (const c of children) killQuietly(c.child.pid, 'SIGKILL');
    await Promise.all(children.map((c) => c.exited));
    await pool?.end();
    await redis?.destroy();
    await server?.stop();
  });

  it('ends with both groups totals equal to what was booked, exactly', async () => {
    const prefix = uniquePrefix('unified');
    const api = await createOutboxApp(
      { prefix, partitions: PARTITIONS, redis: redis.url, autoStart: false, allowDegradedStart: true },
      { connector: pgConnector(pool), relay: { enabled: false }, inbox: { pruneIntervalMs: 0 } },
    );
    const counts = { relayKills: 0, consumerSelfKills: 0, redisKills: 0, doubleSends: 0, absorbed: { distance: 0, rides: 0 } };
    const relayEnv = {
      RELAY_REDIS_URL: redis.url,
      RELAY_DATABASE_URL: databaseUrl,
      RELAY_PREFIX: prefix,
      RELAY_PARTITIONS: String(PARTITIONS),
      RELAY_OUTBOX_TABLE: 'eventrail_outbox',
      RELAY_BATCH_SIZE: '20',
      RELAY_DOUBLE_SEND_RATE: '0.1',
    };
    let consumerSpawns = 0;
    const spawnRelay = (): Child => {
      const relay = spawn('outbox-relay-process.ts', relayEnv);
      relay.child.on('message', (m: { type: string }) => m.type === 'double-sent' && counts.doubleSends++);
      return relay;
    };
    const spawnConsumer = (): Child => {
      const killing = consumerSpawns++ < KILLING_CONSUMERS;
      const consumer = spawn('outbox-consumer-process.ts', {
        CONSUMER_REDIS_URL: redis.url,
        CONSUMER_DATABASE_URL: databaseUrl,
        CONSUMER_PREFIX: prefix,
        CONSUMER_PARTITIONS: String(PARTITIONS),
        CONSUMER_KILL_RATE: killing ? '0.03' : '0',
      });
      consumer.child.on('message', (m: { type: 'duplicate' | 'self-kill'; group: 'distance' | 'rides' }) => {
        if (m.type === 'duplicate') counts.absorbed[m.group]++;
        if (m.type === 'self-kill') counts.consumerSelfKills++;
      });
      // Whoever dies is replaced, so two consumers keep running.
      void consumer.exited.then(() => {
        if (!stopped) consumers.splice(consumers.indexOf(consumer), 1, spawnConsumer());
      });
      return consumer;
    };
    let stopped = false;
    const relays = [spawnRelay(), spawnRelay()];
    const consumers = [spawnConsumer(), spawnConsumer()];

    try {
      await Promise.all([Promise.race(relays.map((r) => r.active)), ...consumers.map((c) => c.ready)]);
      const booked = new Map<string, { km: number; rides: number }>();
      const outbox = api.get(EventrailOutbox);
      const book = async (): Promise<void> => {
        const userId = `user-${Math.floor(random() * USERS)}`;
        const distance = 1 + Math.floor(random() * 50);
        const client = await pool.connect();
        try {
          await client.query('begin');
          const { rows } = await client.query('insert into rides (user_id, distance) values ($1, $2) returning id', [userId, distance]);
          await outbox.publish(client, 'ride.booked', { rideId: rows[0].id as number, userId, distance }, { key: userId });
          await client.query('commit');
        } catch (error) {
          await client.query('rollback');
          throw error;
        } finally {
          client.release();
        }
        const total = booked.get(userId) ?? { km: 0, rides: 0 };
        booked.set(userId, { km: total.km + distance, rides: total.rides + 1 });
      };

      // Book in bursts; between them, a fault: the active relay killed, Redis killed and restarted.
      for (let n = 0; n < RIDES; n++) {
        await book();
        if (n === 80 || n === 200) {
          const active = await Promise.race(relays.map((r) => r.active.then(() => r)));
          killQuietly(active.child.pid, 'SIGKILL');
          await active.exited;
          counts.relayKills++;
          relays.splice(relays.indexOf(active), 1, spawnRelay());
        }
        if (n === 140) {
          await redis.crashAndRestart(300);
          counts.redisKills++;
        }
        if (random() < 0.2) await new Promise((resolve) => setTimeout(resolve, 5)); // spread the bookings over the faults
      }

      const expected = [...booked].sort();
      const totals = async () => {
        const distance = await pool.query('select user_id, km from distance_totals order by user_id');
        const rides = await pool.query('select user_id, rides from ride_counts order by user_id');
        return {
          km: distance.rows.map((r: { user_id: string; km: string }) => [r.user_id, Number(r.km)]),
          rides: rides.rows.map((r: { user_id: string; rides: string }) => [r.user_id, Number(r.rides)]),
        };
      };
      const want = { km: expected.map(([u, t]) => [u, t.km]), rides: expected.map(([u, t]) => [u, t.rides]) };
      const inboxRows = async () => Number((await pool.query('select count(*) as n from eventrail_inbox')).rows[0].n);
      await waitFor(
        async () => (await inboxRows()) === 2 * RIDES,
        () => `every ride handled by both groups\n${children.map((c) => c.output.join('').slice(-3000)).join('\n---\n')}`,
        90_000,
        100,
      );
      // Exactly: an increment per (group, ride), however often the log delivered it.
      expect(await totals()).toEqual(want);
      const client = new Redis(redis.url);
      let inLog = 0;
      for (let p = 0; p < PARTITIONS; p++) inLog += await client.xlen(`{${prefix}:${p}}:log`);
      client.disconnect();
      expect(inLog).toBe(RIDES); // each booking once in the log: double sends and takeovers absorbed by dedup
      // Rows go once Redis acknowledged them: a relay that took over re-sends its killed predecessor's last
      // batch (dedup absorbs it) and deletes it then, so the last rows may still be on their way out here.
      let outboxLeft = -1;
      const outboxEmpty = async () =>
        (outboxLeft = Number((await pool.query('select count(*) as n from eventrail_outbox')).rows[0].n)) === 0;
      await waitFor(outboxEmpty, () => `an empty outbox, ${outboxLeft} rows left`, 30_000, 100);
      console.log(
        `unified log (seed ${seed}): ${RIDES} rides for ${USERS} users, ${inLog} log entries; faults: ${counts.relayKills} relay SIGKILLs, ` +
          `${counts.consumerSelfKills} consumer SIGKILLs after the DB commit, ${counts.redisKills} Redis SIGKILL + AOF restart; ` +
          `${counts.doubleSends} relay batches sent twice; inbox absorbed ${counts.absorbed.distance} redeliveries in distance, ` +
          `${counts.absorbed.rides} in rides; totals equal the booked ones for every user`,
      );
    } finally {
      stopped = true;
      await api.close();
    }
  }, 150_000);
});
