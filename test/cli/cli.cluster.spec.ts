import { Injectable, INestApplicationContext } from '@nestjs/common';
import Redis from 'ioredis';
import {
  DeadLetter,
  EventrailAdmin,
  EventrailMessage,
  EventrailPublisher,
  LogEntry,
  NodeStatus,
  NonRetryableError,
  OnEvent,
  PartitionLogStats,
  PublishResult,
} from '../../lib';
import { EventrailKeys } from '../../lib/redis/keys';
import { assertBuilt, CliProcess, cliEnv, killAll, outcome, parseJson, runCli } from './cli.harness';
import { createApp } from '../support/app';
import { testRedisUrl, waitFor } from '../support/helpers';
import { RedisCluster, startRedisCluster } from '../support/redis-cluster';
import { freePort } from '../support/redis-server';

/** Invoices whose number is in `failing` are dead-lettered at once; the others are recorded as handled. */
const failing = new Set<number>();
const handled: number[] = [];

@Injectable()
class Billing {
  @OnEvent('invoice.created', 'billing')
  handle(message: EventrailMessage<{ n: number }>): void {
    if (failing.has(message.data.n)) throw new NonRetryableError(`invoice ${message.data.n} is invalid`);
    handled.push(message.data.n);
  }
}

/**
 * The built `eventrail` bin against a real 3-master + 3-replica Redis Cluster:
 * `--cluster` (or EVENTRAIL_REDIS_CLUSTER=1) with seed node URLs.
 */
describe('eventrail CLI on Redis Cluster', () => {
  let cluster: RedisCluster;
  /** Two of the six nodes: ioredis learns the others from the cluster. */
  let seeds: string;
  const apps: INestApplicationContext[] = [];

  const env = (prefix: string, extra: Record<string, string> = {}): NodeJS.ProcessEnv =>
    cliEnv(prefix, { EVENTRAIL_REDIS_URL: seeds, ...extra });

  const boot = async (prefix: string, providers: unknown[]): Promise<INestApplicationContext> => {
    const app = await createApp({ redis: { cluster: { nodes: cluster.startupNodes } }, prefix, partitions: 6 }, providers as never[]);
    apps.push(app);
    return app;
  };

  beforeAll(async () => {
    assertBuilt();
    cluster = await startRedisCluster(3);
    seeds = cluster.startupNodes
      .slice(0, 2)
      .map(({ host, port }) => `redis://${host}:${port}`)
      .join(',');
  });
  afterEach(async () => {
    killAll();
    failing.clear();
    handled.length = 0;
    await Promise.all(apps.splice(0).map((app) => app.close()));
  });
  afterAll(async () => {
    await cluster?.stop();
  });

  it('publishes with --cluster, creating the log, and shows which node holds which partitions', async () => {
    const prefix = 'cli-status';
    const first = await runCli(
      ['--cluster', 'publish', 'order.created', '{"n":0}', '--key', 'k0', '--partitions', '6', '--json'],
      env(prefix),
    );
    expect(outcome(first)).toEqual({ code: 0, stderr: '' });
    // The variable instead of the flag.
    const rest = await Promise.all(
      [1, 2, 3].map((n) =>
        runCli(['publish', 'order.created', `{"n":${n}}`, '--key', `k${n}`, '--json'], env(prefix, { EVENTRAIL_REDIS_CLUSTER: '1' })),
      ),
    );
    for (const result of rest) expect(outcome(result)).toEqual({ code: 0, stderr: '' });
    const published = [first, ...rest].map((result) => parseJson<PublishResult>(result));

    const [status, table] = await Promise.all([
      runCli(['--cluster', 'status', '--json'], env(prefix)),
      runCli(['status', '--cluster'], env(prefix)),
    ]);
    for (const result of [status, table]) expect(outcome(result)).toEqual({ code: 0, stderr: '' });
    const report = parseJson<{ redis: string; cluster: boolean; connection: string; nodes: NodeStatus[]; partitions: PartitionLogStats[] }>(
      status,
    );
    expect(report).toMatchObject({ redis: seeds, cluster: true, connection: 'ready' });
    const masters = await cluster.masters();
    expect(report.nodes.map((n) => n.node).sort()).toEqual(masters.map((m) => `127.0.0.1:${m.port}`).sort());
    expect(report.nodes.every((n) => n.replicas.length === 1)).toBe(true);
    expect(report.nodes.flatMap((n) => n.partitions).sort((a, b) => a - b)).toEqual([0, 1, 2, 3, 4, 5]);
    for (const { partition } of published) expect(report.partitions[partition].length).toBeGreaterThan(0);
    expect(report.partitions.reduce((sum, p) => sum + p.length, 0)).toBe(4);

    expect(table.stdout).toMatch(/^Redis:\s+\S+ \(cluster, ready, ping /m);
    for (const node of report.nodes) expect(table.stdout).toContain(node.node);
  });

  it('lists and replays the dead letters of a group', async () => {
    const prefix = 'cli-dlq';
    [1, 2, 3].forEach((n) => failing.add(n));
    const app = await boot(prefix, [Billing]);
    const admin = app.get(EventrailAdmin);
    await app.get(EventrailPublisher).publishMany([1, 2, 3].map((n) => ({ event: 'invoice.created', data: { n }, key: `customer-${n}` })));
    await waitFor(async () => (await admin.deadLetterCount('billing')) === 3, 'three dead letters');
    failing.clear();

    const list = await runCli(['--cluster', 'dlq', 'list', 'billing', '--json'], env(prefix));
    expect(outcome(list)).toEqual({ code: 0, stderr: '' });
    const letters = parseJson<DeadLetter[]>(list);
    expect(letters).toEqual(JSON.parse(JSON.stringify(await admin.deadLetters('billing'))));
    expect(letters.map((d) => (d.data as { n: number }).n).sort()).toEqual([1, 2, 3]);

    const replay = await runCli(['--cluster', 'dlq', 'replay', 'billing', '--all', '--json'], env(prefix));
    expect(outcome(replay)).toEqual({ code: 0, stderr: '' });
    expect(parseJson(replay)).toEqual({ group: 'billing', replayed: 3 });
    await waitFor(
      () => handled.length === 3,
      () => `handled ${JSON.stringify(handled)}`,
    );
    expect([...handled].sort()).toEqual([1, 2, 3]);
    expect(await admin.deadLetterCount('billing')).toBe(0);
  });

  it('tails the events appended after its readiness line, in every partition, until SIGINT', async () => {
    const prefix = 'cli-tail';
    const publisher = (await boot(prefix, [])).get(EventrailPublisher);
    await publisher.publish('x', { key: 'early' }, { key: 'early' }); // before the tail started: not printed

    const tail = new CliProcess(['--cluster', 'tail', '--event', 'x', '--json'], env(prefix));
    await tail.waitForOutput((p) => p.stderr.includes('Tailing'), 'the readiness line');
    const keys = Array.from({ length: 12 }, (_, k) => `k${k}`);
    const published = await publisher.publishMany(
      keys.flatMap((key) => [
        { event: 'y', data: { key }, key },
        { event: 'x', data: { key }, key },
      ]),
    );
    await tail.waitForOutput((p) => p.stdout.trim().split('\n').length >= keys.length, 'every x entry printed');
    tail.signal('SIGINT');
    const result = await tail.exited;
    expect(outcome(result)).toEqual({ code: 0, stderr: expect.stringMatching(/^Tailing "cli-tail" \(6 partition\(s\), events x\)/) });

    const entries = result.stdout
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line) as LogEntry);
    expect(entries.every((e) => e.event === 'x')).toBe(true);
    expect(entries.map((e) => (e.data as { key: string }).key).sort()).toEqual([...keys].sort());
    const xPartitions = new Set(published.filter((_, i) => i % 2 === 1).map((p) => p.partition));
    expect(new Set(entries.map((e) => e.partition))).toEqual(xPartitions);
    expect(xPartitions.size).toBeGreaterThan(1);
  });

  it('fails fast and says why: unreachable seeds, a plain Redis, a cluster node without --cluster, several URLs without it', async () => {
    const prefix = 'cli-fail';
    await boot(prefix, []);
    // A node that does not serve the log's metadata answers MOVED to a plain connection.
    const probe = new Redis(cluster.nodes[0].port, '127.0.0.1');
    const slot = (await probe.cluster('KEYSLOT', new EventrailKeys(prefix, 6).meta)) as unknown as number;
    probe.disconnect();
    const owner = (await cluster.masters()).find((m) => m.slots.some(([from, to]) => slot >= from && slot <= to));
    const other = cluster.nodes.find((n) => n.port !== owner?.port) as { port: number };
    const [closedA, closedB] = [await freePort(), await freePort()];
    const unreachable = `redis://ops:s3cret@127.0.0.1:${closedA},redis://127.0.0.1:${closedB}`;

    const [refused, plain, moved, several, badEnv] = await Promise.all([
      runCli(['--cluster', '--redis-url', unreachable, 'status'], env(prefix)),
      runCli(['--cluster', '--redis-url', testRedisUrl(), 'status'], env(prefix)),
      runCli(['status', '--redis-url', `redis://127.0.0.1:${other.port}`], env(prefix)),
      // The flag beats the variable.
      runCli(['--no-cluster', 'status'], env(prefix, { EVENTRAIL_REDIS_CLUSTER: '1' })),
      runCli(['status'], env(prefix, { EVENTRAIL_REDIS_CLUSTER: 'maybe' })),
    ]);
    expect(outcome(refused)).toEqual({
      code: 1,
      stderr: `eventrail: Redis is unavailable: cannot connect to Redis Cluster seeds redis://ops:***@127.0.0.1:${closedA},redis://127.0.0.1:${closedB} (connect ECONNREFUSED 127.0.0.1:${closedA})\n`,
    });
    expect(outcome(plain)).toEqual({ code: 1, stderr: expect.stringContaining('cluster support disabled') });
    expect(outcome(moved)).toEqual({
      code: 1,
      stderr: expect.stringMatching(/MOVED \d+ .*: the server is a Redis Cluster node; pass --cluster/),
    });
    expect(outcome(several)).toEqual({ code: 2, stderr: expect.stringContaining('lists several nodes') });
    expect(outcome(badEnv)).toEqual({
      code: 2,
      stderr: 'eventrail: EVENTRAIL_REDIS_CLUSTER must be 1 or 0 (true/false, yes/no), got "maybe"\n',
    });
  });
});
