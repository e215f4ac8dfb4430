import { Injectable, INestApplicationContext, Logger } from '@nestjs/common';
import { TerminusModule } from '@nestjs/terminus';
import Redis from 'ioredis';
import { EventrailAdmin, eventrailAclRules, EventrailMessage, EventrailPublisher, OnEvent } from '../../lib';
import { EventrailHealthIndicator, EventrailHealthModule } from '../../lib/health';
import { EventrailKeys } from '../../lib/redis/keys';
import { aclLog, createAclUser } from '../support/acl';
import { createApp } from '../support/app';
import { uniquePrefix, waitFor } from '../support/helpers';
import { RedisServer, startRedisServer } from '../support/redis-server';

const handled: number[] = [];

@Injectable()
class Worker {
  @OnEvent('job.done', 'workers')
  handle(message: EventrailMessage<{ n: number }>): void {
    handled.push(message.data.n);
  }
}

/**
 * What managed services do to the commands eventrail only uses for checks:
 * `CONFIG` renamed away (`rename-command CONFIG ""`, a config line), and an
 * ACL user without `INFO`, `CONFIG`, `ROLE` or `WAIT`. eventrail keeps
 * publishing and consuming, says once at startup what it could not check,
 * and never sends a refused command again (ACL LOG counts every denial).
 */
describe('refused server commands', () => {
  let server: RedisServer;
  let root: Redis;
  const apps: INestApplicationContext[] = [];
  let warn: jest.SpyInstance;

  beforeAll(async () => {
    server = await startRedisServer(undefined, ['--rename-command', 'CONFIG', '']);
    root = new Redis(server.url);
  });
  beforeEach(() => {
    handled.length = 0;
    warn = jest.spyOn(Logger.prototype, 'warn');
  });
  afterEach(async () => {
    await Promise.all(apps.splice(0).map((app) => app.close()));
    warn.mockRestore();
  });
  afterAll(async () => {
    root?.disconnect();
    await server?.stop();
  });

  const start = async (redis: string, prefix: string, durability: 'acknowledged' | 'replicated' = 'acknowledged') => {
    const app = await createApp({ redis, prefix, durability }, [Worker], [TerminusModule, EventrailHealthModule]);
    apps.push(app);
    return app;
  };
  const warnings = (): string[] => warn.mock.calls.map(([message]) => String(message));
  const publishAndConsume = async (app: INestApplicationContext): Promise<void> => {
    const publisher = app.get(EventrailPublisher);
    for (let n = 1; n <= 3; n++) await publisher.publish('job.done', { n }, { durability: 'acknowledged' });
    await waitFor(
      () => handled.length === 3,
      () => `3 handled, got ${handled.join(',')}`,
    );
  };

  it('with CONFIG renamed away, reads persistence and the eviction policy from INFO instead', async () => {
    await expect(root.config('GET', 'appendonly')).rejects.toThrow(/unknown command/);
    const app = await start(server.url, uniquePrefix('noconfig'));
    await publishAndConsume(app);
    // The server runs without AOF: INFO persistence told, so the durability warning is there.
    expect(warnings().some((w) => w.includes('appendonly no'))).toBe(true);
    expect(warnings().some((w) => w.includes('not checked'))).toBe(false);
    const report = (await app.get(EventrailHealthIndicator).isHealthy('eventrail')) as unknown as {
      eventrail: { evictionPolicies: unknown[] };
    };
    expect(report.eventrail.evictionPolicies).toEqual([{ node: `127.0.0.1:${server.port}`, policy: 'noeviction' }]);
  });

  it('as a user without scripting: publish and publishMany append one XADD per event, in order', async () => {
    const prefix = uniquePrefix('noscript');
    await createAclUser(root, 'noscript', 'pw', `${eventrailAclRules(prefix).full} -evalsha -eval`);
    const app = await createApp({ redis: `redis://noscript:pw@127.0.0.1:${server.port}`, prefix });
    apps.push(app);
    const publisher = app.get(EventrailPublisher);
    const results = await publisher.publishMany(Array.from({ length: 30 }, (_, n) => ({ event: 'plain', data: { n } })));
    await publisher.publish('plain', { n: 30 });
    const entries = await root.xrange(new EventrailKeys(prefix, 1).stream(0), '-', '+');
    expect(entries.map(([, f]) => JSON.parse(f[f.indexOf('data') + 1]).n)).toEqual(Array.from({ length: 31 }, (_, n) => n));
    expect(results.map((r) => r.offset)).toEqual(entries.slice(0, 30).map(([offset]) => offset));
    // Asked once whether the script may run; refused, it is not sent again.
    await publisher.publishMany([
      { event: 'plain', data: { n: 31 } },
      { event: 'plain', data: { n: 32 } },
    ]);
    // A big entry (over 16 KiB) goes as a plain XADD as well, once the publisher knows: its partition is marked as not
    // indexed first, so workers read it with the byte-counting script.
    const keys = new EventrailKeys(prefix, 1);
    const big = await publisher.publish('plain', { n: 33, blob: 'x'.repeat(20_000) });
    expect((await root.xrange(keys.stream(0), big.offset, big.offset)).length).toBe(1);
    expect(await root.get(keys.indexedFrom(0))).toBe('none');
    expect(await root.zcard(keys.bigEntries(0))).toBe(0);
    const denied = (await aclLog(root, 'noscript')).filter((d) => d.object === 'evalsha' || d.object === 'eval');
    expect(denied.reduce((sum, d) => sum + d.count, 0)).toBeGreaterThanOrEqual(1);
    expect(denied.reduce((sum, d) => sum + d.count, 0)).toBeLessThanOrEqual(2);
  });

  it('as a user without INFO, CONFIG, ROLE or WAIT: works, warns once about what it could not check, never asks again', async () => {
    const prefix = uniquePrefix('noinfo');
    await createAclUser(root, 'managed', 'pw', eventrailAclRules(prefix).full);
    const app = await start(`redis://managed:pw@127.0.0.1:${server.port}`, prefix, 'replicated');
    await publishAndConsume(app);

    const unchecked = warnings().filter((w) => w.includes('not checked'));
    expect(unchecked).toHaveLength(1);
    expect(unchecked[0]).toMatch(
      /persistence of 127\.0\.0\.1:\d+ \(.*NOPERM.*\).*eviction policy of 127\.0\.0\.1:\d+ \(.*NOPERM.*\).*WAIT \(NOPERM/,
    );

    const admin = app.get(EventrailAdmin);
    const health = app.get(EventrailHealthIndicator);
    const inspect = async (): Promise<void> => {
      const report = (await health.isHealthy('eventrail')) as unknown as { eventrail: { status: string; evictionPolicies: unknown[] } };
      expect(report.eventrail).toMatchObject({ status: 'up', evictionPolicies: [{ policy: null }] });
      expect((await admin.stats()).usedMemoryBytes).toBeNull();
      expect((await admin.nodes())[0]).toMatchObject({ node: `127.0.0.1:${server.port}`, replicas: [] });
    };
    await inspect(); // the first admin.nodes() is refused ROLE once
    const denied = await aclLog(root, 'managed');
    for (let i = 0; i < 3; i++) await inspect();
    // Health checks, stats and nodes sent no refused command again: the denial counts did not move.
    expect(await aclLog(root, 'managed')).toEqual(denied);
    expect(denied.map((d) => d.object)).toEqual(expect.arrayContaining(['info', 'wait', 'role']));
    console.log(
      `refused (ACL LOG, command x count): ${denied.map((d) => `${d.object} x${d.count}`).join(', ')}; none again after 3 more checks`,
    );
  });
});
