import { Injectable, INestApplicationContext } from '@nestjs/common';
import Redis from 'ioredis';
import {
  EventrailAdmin,
  eventrailAclRules,
  EventrailMessage,
  EventrailPublisher,
  NonRetryableError,
  OnEvent,
  RedisPermissionError,
  RedisUnavailableError,
} from '../../lib';
import { createApp } from '../support/app';
import { uniquePrefix, waitFor } from '../support/helpers';
import { RedisServer, startRedisServer } from '../support/redis-server';
import { assertBuilt, cliEnv, runCli } from '../cli/cli.harness';
import { aclLog, createAclUser } from '../support/acl';

const ledger: string[] = [];
const mailer: string[] = [];
let failMailerFor = 3;

@Injectable()
class Handlers {
  @OnEvent(['order.placed'], { group: 'ledger', enableIdempotency: true, concurrency: 2 })
  book(message: EventrailMessage<{ n: number }>): void {
    ledger.push(`${message.data.n}`);
  }

  @OnEvent('order.placed', { group: 'mailer', maxRetries: 0 })
  mail(message: EventrailMessage<{ n: number }>): void {
    if (message.data.n === failMailerFor) throw new NonRetryableError(`no address for ${message.data.n}`);
    mailer.push(`${message.data.n}`);
  }
}

/**
 * eventrail as a least-privilege ACL user, on a redis-server of its own: the
 * publisher, both consumer groups (idempotency, dead letters), dedup, the
 * dead-letter replay, offset reset and retention as a user with exactly
 * `eventrailAclRules(prefix).full` (plus the optional commands), and the
 * admin read path as the read-only user, whose writes are refused with
 * `RedisPermissionError`. ACL LOG proves no command was denied on the way.
 */
describe('Permissions (ACL)', () => {
  let server: RedisServer;
  let root: Redis;
  const prefix = uniquePrefix('acl');
  const rules = eventrailAclRules(prefix);
  const apps: INestApplicationContext[] = [];

  beforeAll(async () => {
    server = await startRedisServer();
    root = new Redis(server.url);
    await createAclUser(root, 'eventrail-app', 'app-secret', `${rules.full} ${rules.optional}`);
    await createAclUser(root, 'eventrail-reader', 'read-secret', `${rules.readOnly} ${rules.optional}`);
  });
  afterAll(async () => {
    await Promise.all(apps.map((app) => app.close()));
    root?.disconnect();
    await server?.stop();
  });

  const urlFor = (user: string, password: string): string => `redis://${user}:${password}@127.0.0.1:${server.port}`;

  it('runs publisher, consumers, dead letters, replay, offset reset and retention as the full user, with no command denied', async () => {
    const app = await createApp(
      {
        redis: urlFor('eventrail-app', 'app-secret'),
        prefix,
        partitions: 2,
        dedupWindowMs: 60_000,
        retention: { enabled: false, maxLen: 1 },
      },
      [Handlers],
    );
    apps.push(app);
    const publisher = app.get(EventrailPublisher);
    const admin = app.get(EventrailAdmin);

    for (let n = 1; n <= 4; n++) await publisher.publish('order.placed', { n }, { key: `c-${n}` });
    await publisher.publishMany([5, 6].map((n) => ({ event: 'order.placed', data: { n }, key: `c-${n}` })));
    // Producer dedup (a script): the second call appends nothing.
    await publisher.publish('order.placed', { n: 7 }, { key: 'c-7', id: '0190a000-0000-7000-8000-000000000007' });
    await publisher.publish('order.placed', { n: 7 }, { key: 'c-7', id: '0190a000-0000-7000-8000-000000000007' });

    await waitFor(
      () => ledger.length === 7 && mailer.length === 6,
      () => `ledger ${ledger.join(',')} mailer ${mailer.join(',')}`,
    );
    await waitFor(async () => (await admin.deadLetterCount('mailer')) === 1, 'one dead letter in mailer');
    failMailerFor = -1;
    expect(await admin.replayDeadLetters('mailer', 'all')).toBe(1);
    await waitFor(() => mailer.includes('3'), 'the replayed dead letter handled');

    const groups = await admin.groups();
    expect(groups.map((g) => g.name).sort()).toEqual(['ledger', 'mailer']);
    await waitFor(async () => (await admin.groups()).every((g) => g.lag === 0), 'both groups caught up');
    const trimmed = await admin.runRetention();
    expect(trimmed.partitions.length).toBe(2);
    const reset = await admin.resetOffsets('ledger', 'end', { force: true });
    expect(reset.partitions).toHaveLength(2);

    expect(await aclLog(root, 'eventrail-app')).toEqual([]);
  });

  it('reads the admin API as the read-only user; its writes fail with RedisPermissionError and the app keeps answering', async () => {
    const app = await createApp({ redis: urlFor('eventrail-reader', 'read-secret'), prefix, partitions: 2 });
    apps.push(app);
    const admin = app.get(EventrailAdmin);

    const overview = await admin.overview();
    expect(overview.groups.map((g) => g.name).sort()).toEqual(['ledger', 'mailer']);
    expect((await admin.group('mailer')).name).toBe('mailer');
    expect(Array.isArray(await admin.deadLetters('mailer'))).toBe(true);
    expect((await admin.readLog(0)).entries.length).toBeGreaterThan(0);
    expect((await admin.nodes())[0].node).toBe(`127.0.0.1:${server.port}`);

    await expect(admin.replayDeadLetters('mailer', 'all')).resolves.toBe(0); // nothing to replay: nothing written
    await root.xadd(`${prefix}:group:{mailer}:dlq`, '*', 'event', 'order.placed', 'data', '{"n":8}');
    await expect(admin.purgeDeadLetters('mailer')).rejects.toThrow(RedisPermissionError);
    await expect(admin.resetOffsets('mailer', 'start', { force: true })).rejects.toThrow(
      /Redis refused to reset offsets: (NOPERM|ERR The user executing the script can't run|ERR ACL failure in script)/,
    );
    await expect(admin.deleteGroup('mailer', { force: true })).rejects.toThrow(RedisPermissionError);
    const refusedPublish = app.get(EventrailPublisher).publish('order.placed', { n: 99 });
    await expect(refusedPublish).rejects.toThrow(RedisUnavailableError);
    await expect(refusedPublish).rejects.toThrow(/NOPERM/);

    expect((await admin.overview()).groups).toHaveLength(2);
    // Only writes were denied.
    const denied = (await aclLog(root, 'eventrail-reader')).map((entry) => entry.object);
    expect(denied.length).toBeGreaterThan(0);
    // Only writes were refused: sent directly, or called by a write script (scripts may run, their writes may not).
    const writes = ['del', 'xadd', 'set', 'publish', 'multi', 'exec', 'incr', 'hset', 'hdel', 'hsetnx', 'hincrby', 'zadd', 'zrem'];
    for (const command of denied) expect([...writes, 'zremrangebyscore', 'pexpire', 'xtrim', 'xdel', 'sadd', 'srem']).toContain(command);
  });

  describe('CLI', () => {
    beforeAll(() => assertBuilt());

    it('status works as the read-only user; offsets reset exits 1 naming the refusal', async () => {
      const env = cliEnv(prefix, { EVENTRAIL_REDIS_URL: urlFor('eventrail-reader', 'read-secret') });
      const status = await runCli(['status'], env);
      expect({ code: status.code, stderr: status.stderr }).toEqual({ code: 0, stderr: '' });
      const reset = await runCli(['offsets', 'reset', 'mailer', '--to-end', '--force', '--yes'], env);
      expect(reset.code).toBe(1);
      expect(reset.stderr).toMatch(
        /Redis refused to reset offsets: (NOPERM|ERR The user executing the script can't run|ERR ACL failure in script)/,
      );
    });
  });
});
