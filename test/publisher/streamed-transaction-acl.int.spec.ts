import { INestApplicationContext } from '@nestjs/common';
import Redis from 'ioredis';
import { EventrailPublisher, PublishInput, PublishManyError, PublishResult } from '../../lib';
import { EventrailRedis } from '../../lib/redis/eventrail-redis';
import { EventrailKeys } from '../../lib/redis/keys';
import { eventrailAclRules } from '../../lib/redis/acl-rules';
import { LeanTransaction } from '../../lib/redis/lean-command';
import { createAclUser } from '../support/acl';
import { createApp } from '../support/app';
import { uniquePrefix } from '../support/helpers';
import { RedisServer, startRedisServer } from '../support/redis-server';

/**
 * A `publishMany` transaction is written in parts as it is built once Redis
 * answered a MULTI on the connection (lean-command.ts, `LeanTransaction`).
 * When building it fails late (a getter that throws, a big entry), what was
 * written is ended, and each event must be reported as what it came to, with
 * the publisher's user holding exactly eventrail's ACL rules: as they stand,
 * and changed at run time to refuse MULTI, where
 * the XADDs written run on their own. Each event is checked against XRANGE:
 * in the log exactly once if reported appended, at its offset; absent if not.
 */
const PARTITIONS = 4;
/** Events per call: a transaction written in parts of 128. */
const EVENTS = 600;
/** Where the late failure comes: before the first part is written, at and around part boundaries, last. */
const LATE_AT = [1, 127, 128, 129, 300, 450, 599];
/** The events written in parts before the one at `late` fails (a part leaves once 128 are added and more follow). */
const writtenBefore = (late: number): number => Math.floor(late / 128) * 128;

describe('a publishMany written in parts, ended late, under eventrail ACL rules (MULTI granted, then refused at run time)', () => {
  let server: RedisServer;
  let redis: Redis;
  const apps: INestApplicationContext[] = [];

  beforeAll(async () => {
    server = await startRedisServer();
    redis = new Redis(server.url);
  });
  afterAll(async () => {
    await Promise.all(apps.map((app) => app.close()));
    redis?.disconnect();
    await server?.stop();
  });

  /** A publisher connected as `user` on whose connection Redis has answered a MULTI (its transactions go in parts). */
  async function publisherOf(prefix: string, user: string): Promise<{ publisher: EventrailPublisher; client: Redis }> {
    const app = await createApp({
      redis: { host: '127.0.0.1', port: server.port, username: user, password: 'secret' },
      prefix,
      partitions: PARTITIONS,
    });
    apps.push(app);
    const publisher = app.get(EventrailPublisher);
    // The first call asks whether scripts run here; the second goes as a transaction Redis answers.
    for (let warm = 0; warm < 2; warm++) await publisher.publishMany([0, 1].map((n) => ({ event: 'warm', data: { n }, partition: n })));
    const client = app.get(EventrailRedis).client as Redis;
    expect(LeanTransaction.confirmed(client)).toBe(true);
    return { publisher, client };
  }

  function inputsOf(event: string, late: 'getter' | 'big', at = late === 'getter' ? 450 : 500): PublishInput[] {
    let reads = 0;
    return Array.from({ length: EVENTS }, (_, n) => {
      let data: Record<string, unknown> = { n };
      // Read once by the checks, and again as it is serialised: it throws then, after the parts before it were written.
      if (late === 'getter' && n === at)
        data = {
          get n(): number {
            if (++reads > 1) throw new Error('read twice');
            return n;
          },
        };
      // Over 16 KiB: an entry the transaction cannot take (it is indexed as it lands).
      if (late === 'big' && n === at) data = { n, big: 'x'.repeat(20_000) };
      return { event, data, partition: n % PARTITIONS };
    });
  }

  /** Each event's copies in the log: `[partition, offset]` by its `n`. */
  async function copiesOf(prefix: string, event: string): Promise<Map<number, Array<[number, string]>>> {
    const keys = new EventrailKeys(prefix, PARTITIONS);
    const copies = new Map<number, Array<[number, string]>>();
    for (let p = 0; p < PARTITIONS; p++) {
      for (const [offset, fields] of await redis.xrange(keys.stream(p), '-', '+')) {
        if (fields[fields.indexOf('event') + 1] !== event) continue;
        const { n } = JSON.parse(fields[fields.indexOf('data') + 1]) as { n: number };
        copies.set(n, [...(copies.get(n) ?? []), [p, offset]]);
      }
    }
    return copies;
  }

  /** Violations of "in the log exactly once, at the offset answered, if and only if reported appended". */
  async function violations(
    prefix: string,
    event: string,
    inputs: PublishInput[],
    outcome: PublishResult[] | PublishManyError,
  ): Promise<string[]> {
    const copies = await copiesOf(prefix, event);
    const wrong: string[] = [];
    inputs.forEach((input, n) => {
      const found = copies.get(n) ?? [];
      const appended = Array.isArray(outcome) || outcome.outcomes[n] === 'appended';
      const result = Array.isArray(outcome) ? outcome[n] : outcome.results[n];
      if (!appended) {
        if (found.length > 0)
          wrong.push(`${event}/${n}: reported ${(outcome as PublishManyError).outcomes[n]}, in the log ${found.length}x`);
        return;
      }
      if (found.length !== 1) wrong.push(`${event}/${n}: reported appended, in the log ${found.length}x`);
      else if (found[0][0] !== input.partition || found[0][1] !== result?.offset)
        wrong.push(`${event}/${n}: answered ${result?.partition}/${result?.offset}, in the log at ${found[0].join('/')}`);
    });
    // Per partition, the call's events in call order.
    for (let p = 0; p < PARTITIONS; p++) {
      const order = [...copies.entries()].filter(([, at]) => at[0][0] === p).sort((a, b) => compareIds(a[1][0][1], b[1][0][1]));
      const ns = order.map(([n]) => n);
      if (ns.join() !== [...ns].sort((a, b) => a - b).join()) wrong.push(`${event}: partition ${p} out of order`);
    }
    return wrong;
  }

  /** The publisher's next `publish` answers its own offset: the connection's replies are in step. */
  async function assertInStep(publisher: EventrailPublisher, prefix: string): Promise<void> {
    const single = await publisher.publish('after', { n: 0 }, { partition: 2 });
    const [last] = await redis.xrevrange(new EventrailKeys(prefix, PARTITIONS).stream(2), '+', '-', 'COUNT', 1);
    expect(single.offset).toBe(last[0]);
  }

  async function runGuardsLeft(prefix: string): Promise<string[]> {
    return (await redis.keys(`{${prefix}:*`)).filter((key) => key.includes(':run:'));
  }

  it('MULTI granted: a late getter appends nothing, a late big entry lands every event once, and the connection stays in step', async () => {
    const prefix = uniquePrefix('streamed-acl-ok');
    const rules = eventrailAclRules(prefix);
    await createAclUser(redis, 'streamed-ok', 'secret', `${rules.full} ${rules.optional}`);
    const { publisher } = await publisherOf(prefix, 'streamed-ok');

    for (const at of LATE_AT) {
      const throwing = inputsOf(`late${at}`, 'getter', at);
      const refused = (await publisher.publishMany(throwing).catch((e: unknown) => e)) as PublishManyError;
      expect(refused).toBeInstanceOf(PublishManyError);
      expect(refused.outcomes).toEqual(throwing.map(() => 'not-appended'));
      expect(await violations(prefix, `late${at}`, throwing, refused)).toEqual([]);
      await assertInStep(publisher, prefix);

      const withBig = inputsOf(`big${at}`, 'big', at);
      const results = await publisher.publishMany(withBig);
      expect(await violations(prefix, `big${at}`, withBig, results)).toEqual([]);
      expect(await runGuardsLeft(prefix)).toEqual([]);
      await assertInStep(publisher, prefix);
    }
  });

  it('MULTI refused by an ACL change at run time: what was written and ran on its own is reported appended, nothing lands twice', async () => {
    const prefix = uniquePrefix('streamed-acl-later');
    const rules = eventrailAclRules(prefix);
    await createAclUser(redis, 'streamed-later', 'secret', `${rules.full} ${rules.optional}`);
    // Per position, two connections on which Redis answered a MULTI; then the user loses MULTI.
    const connections = [];
    for (const at of LATE_AT)
      connections.push({ at, big: await publisherOf(prefix, 'streamed-later'), getter: await publisherOf(prefix, 'streamed-later') });
    await redis.call('ACL', 'SETUSER', 'streamed-later', '-multi');

    for (const { at, big, getter } of connections) {
      // A big event: the parts written before it ran on their own, the rest go as runs.
      const withBig = inputsOf(`big${at}`, 'big', at);
      const results = await big.publisher.publishMany(withBig);
      expect(results).toHaveLength(EVENTS);
      expect(await violations(prefix, `big${at}`, withBig, results)).toEqual([]);
      expect(await runGuardsLeft(prefix)).toEqual([]);

      // A getter that throws: the parts written before it (384 events for 450) ran on their own; the rest were never sent.
      const throwing = inputsOf(`late${at}`, 'getter', at);
      const refused = (await getter.publisher.publishMany(throwing).catch((e: unknown) => e)) as PublishManyError;
      expect(refused).toBeInstanceOf(PublishManyError);
      expect(refused.outcomes).toEqual(throwing.map((_, n) => (n < writtenBefore(at) ? 'appended' : 'not-appended')));
      expect(await violations(prefix, `late${at}`, throwing, refused)).toEqual([]);

      // Neither connection writes a transaction again: the next calls go as runs, each event once.
      for (const [i, { publisher, client }] of [big, getter].entries()) {
        if (writtenBefore(at) > 0) expect(LeanTransaction.confirmed(client)).toBe(false);
        const next = inputsOf(`next${at}-${i}`, 'big');
        expect(await violations(prefix, `next${at}-${i}`, next, await publisher.publishMany(next))).toEqual([]);
        await assertInStep(publisher, prefix);
      }
    }
  });
});

function compareIds(a: string, b: string): number {
  const [ams, aseq] = a.split('-').map(BigInt);
  const [bms, bseq] = b.split('-').map(BigInt);
  return ams === bms ? Number(aseq - bseq) : ams < bms ? -1 : 1;
}
