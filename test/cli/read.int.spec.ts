import { Injectable } from '@nestjs/common';
import { createServer, Server } from 'node:net';
import { EventrailAdmin, EventrailConsumers, EventrailMessage, EventrailPublisher, GroupStatus, LogStats, OnEvent } from '../../lib';
import { EventrailKeys } from '../../lib/redis/keys';
import { waitFor } from '../support/helpers';
import { freePort } from '../support/redis-server';
import { cliEnv, outcome, parseJson, runCli, useCliSuite } from './cli.harness';

@Injectable()
class Billing {
  @OnEvent(['invoice.created', 'invoice.paid'], 'billing')
  handle(_message: EventrailMessage): void {}
}

describe('eventrail CLI: read commands, failures and usage errors', () => {
  const suite = useCliSuite('cli');

  it('prints status, groups and one group as JSON that matches the admin service, and as tables', async () => {
    const app = await suite.start([Billing]);
    const admin = app.get(EventrailAdmin);
    const published = await app.get(EventrailPublisher).publishMany([
      { event: 'invoice.created', data: { n: 1 }, partition: 0 },
      { event: 'invoice.paid', data: { n: 2 }, partition: 1 },
      { event: 'invoice.paid', data: { n: 3 }, partition: 1 },
    ]);
    await waitFor(async () => (await admin.group('billing')).lag === 0, 'billing caught up');
    const env = cliEnv(suite.prefix);

    const [status, groups, group, groupsTable, groupTable, statusTable] = await Promise.all([
      runCli(['status', '--json'], env),
      runCli(['groups', '--json'], env),
      runCli(['group', 'billing', '--json'], env),
      runCli(['groups'], env),
      runCli(['group', 'billing'], env),
      runCli(['status'], env),
    ]);
    for (const result of [status, groups, group, groupsTable, groupTable, statusTable])
      expect(outcome(result)).toEqual({ code: 0, stderr: '' });

    const workerId = app.get(EventrailConsumers).workerId;
    const stats: LogStats = await admin.stats();
    const report = parseJson<{
      prefix: string;
      connection: string;
      pingMs: number;
      partitions: unknown;
      groups: unknown[];
      nodes: unknown[];
    }>(status);
    expect(report).toMatchObject({ prefix: suite.prefix, connection: 'ready', partitions: stats.partitions });
    expect(report.pingMs).toBeGreaterThanOrEqual(0);
    expect(report.nodes).toEqual([expect.objectContaining({ partitions: [0, 1] })]);
    expect(report.groups).toEqual([
      { name: 'billing', members: 1, lag: 0, lagCapped: false, deadLetters: 0, lastSeen: expect.any(String) },
    ]);

    // Heartbeat times move between two reads; the rest must be what the admin service says.
    const stable = (g: GroupStatus) => ({
      name: g.name,
      events: g.events,
      members: g.members.map((m) => ({ workerId: m.workerId, pid: m.pid, host: m.host })),
      partitions: g.partitions.map((p) => ({ partition: p.partition, committed: p.committed, lag: p.lag, leaseOwner: p.leaseOwner })),
      lag: g.lag,
      deadLetters: g.deadLetters,
    });
    const expected = (await admin.groups()).map(stable);
    expect(parseJson<GroupStatus[]>(groups).map(stable)).toEqual(expected);
    expect(stable(parseJson<GroupStatus>(group))).toEqual(expected[0]);
    expect(expected[0].partitions.map((p) => p.committed)).toEqual([published[0].offset, published[2].offset]);

    const [header, row] = groupsTable.stdout.trimEnd().split('\n');
    expect(header.split(/\s{2,}/)).toEqual(['GROUP', 'MEMBERS', 'LAG', 'DEAD LETTERS', 'LAST SEEN', 'EVENTS']);
    expect(row.split(/\s{2,}/)).toEqual([
      'billing',
      '1',
      '0',
      '0',
      expect.stringMatching(/^\d{4}-\d\d-\d\dT/),
      'invoice.created,invoice.paid',
    ]);
    expect(groupTable.stdout).toContain(workerId);
    expect(groupTable.stdout).toMatch(new RegExp(`^\\s*1\\s+${published[2].offset}\\s+0\\s+${workerId}`, 'm'));
    expect(statusTable.stdout).toMatch(/^Prefix:\s+cli-/m);
    expect(statusTable.stdout).toMatch(new RegExp(`^\\s*1\\s+2\\s+${published[1].offset}\\s+${published[2].offset}$`, 'm'));
  });

  it('shows a lag past the count cap as 10000+', async () => {
    const app = await suite.start([]);
    const published = await app
      .get(EventrailPublisher)
      .publishMany(Array.from({ length: 20_002 }, (_, n) => ({ event: 'bulk.item', data: { n }, partition: 0 })));
    // Groups whose workers are gone: one never consumed (its lag is the length, exact), one stopped
    // with more than the cap on both sides of its offset (capped).
    const keys = new EventrailKeys(suite.prefix, 2);
    await suite.redis.sadd(keys.groups, 'ghost', 'stalled');
    await suite.redis.set(keys.offset('stalled', 0), published[10_000].offset);

    const [table, json] = await Promise.all([runCli(['groups'], cliEnv(suite.prefix)), runCli(['groups', '--json'], cliEnv(suite.prefix))]);
    expect(outcome(table)).toEqual({ code: 0, stderr: '' });
    expect(table.stdout).toMatch(/^ghost\s+0\s+20002\s+0\s+-/m);
    expect(table.stdout).toMatch(/^stalled\s+0\s+10000\+\s+0\s+-/m);
    const [ghost, stalled] = parseJson<GroupStatus[]>(json);
    expect(ghost).toMatchObject({ name: 'ghost', lag: 20_002 });
    expect(ghost.partitions[0]).toMatchObject({ lag: 20_002, lagCapped: false });
    expect(stalled).toMatchObject({ name: 'stalled', lag: 10_000 });
    expect(stalled.partitions[0]).toMatchObject({ lag: 10_000, lagCapped: true });
  });

  it('fails with exit code 1 on an unknown group, a prefix without a log, and an unreachable Redis', async () => {
    await suite.start([]);
    // Accepts connections and never answers; reads them so it sees the client hang up.
    const blackhole: Server = createServer((socket) => socket.resume());
    await new Promise<void>((resolve) => blackhole.listen(0, '127.0.0.1', resolve));
    const silentPort = (blackhole.address() as { port: number }).port;
    const refusedPort = await freePort();
    try {
      const [unknown, unknownJson, noLog, refused, silent] = await Promise.all([
        runCli(['group', 'nope'], cliEnv(suite.prefix)),
        runCli(['--json', 'dlq', 'list', 'nope'], cliEnv(suite.prefix)),
        runCli(['groups'], cliEnv(`${suite.prefix}-none`)),
        runCli(['status', '--redis-url', `redis://127.0.0.1:${refusedPort}`], cliEnv(suite.prefix)),
        runCli(['status', '--connect-timeout', '1000'], cliEnv(suite.prefix, { EVENTRAIL_REDIS_URL: `redis://127.0.0.1:${silentPort}` })),
      ]);
      expect(outcome(unknown)).toEqual({
        code: 1,
        stderr: 'eventrail: Unknown consumer group "nope": no worker of it ever registered in this log\n',
      });
      expect(unknown.stdout).toBe('');
      expect(unknownJson.code).toBe(1);
      expect(parseJson(unknownJson)).toEqual({ error: { name: 'UnknownGroupError', message: expect.stringContaining('"nope"') } });
      expect(outcome(noLog)).toEqual({
        code: 1,
        stderr: expect.stringMatching(/^eventrail: No eventrail log with prefix "cli-\w+-none"/),
      });
      // A read must not create the log it did not find.
      expect(await suite.redis.exists(new EventrailKeys(`${suite.prefix}-none`, 1).meta)).toBe(0);
      expect(outcome(refused)).toEqual({ code: 1, stderr: expect.stringContaining('ECONNREFUSED') });
      // The flag beats the environment: refused went to the closed port although EVENTRAIL_REDIS_URL is the test Redis.
      expect(outcome(silent)).toEqual({ code: 1, stderr: expect.stringContaining('within 1000 ms') });
    } finally {
      await new Promise((resolve) => blackhole.close(resolve));
    }
  });

  it('exits with code 2 and one line on stderr for usage errors, before touching Redis', async () => {
    // No log at this prefix: a usage error must be reported without connecting (else it would say "no log").
    const env = cliEnv(suite.prefix);
    const cases: Array<[string[], RegExp]> = [
      [['frobnicate'], /unknown command 'frobnicate'/],
      [['groups', '--colour'], /unknown option '--colour'/],
      [['group'], /missing required argument 'name'/],
      [['publish', 'order.created', '{"total":'], /not valid JSON/],
      [['offsets', 'reset', 'billing'], /exactly one of --to-start/],
      [['offsets', 'reset', 'billing', '--to-start', '--to-end', '--yes'], /exactly one of --to-start/],
      [['offsets', 'reset', 'billing', '--to-time', 'last tuesday', '--yes'], /--to-time.*invalid/],
      [['offsets', 'reset', 'billing', '--to-id', '12', '--yes'], /--to-id.*invalid/],
      [['offsets', 'reset', 'billing', '--to-start'], /pass --yes/],
      [['dlq', 'purge', 'billing'], /pass --yes/],
      [['prune-stale'], /pass --yes/],
      [['dlq', 'replay', 'billing'], /either dead-letter ids or --all/],
      [['dlq', 'list', 'billing', '--count', '0'], /--count.*invalid/],
      [['dlq', 'restore', 'billing'], /needs --archive/],
    ];
    const results = await Promise.all(cases.map(([args]) => runCli(args, env)));
    results.forEach((result, i) => {
      const [args, message] = cases[i];
      expect({ args, ...outcome(result) }).toEqual({ args, code: 2, stderr: expect.stringMatching(message) });
      expect(result.stderr).toMatch(/^eventrail: [^\n]+\n$/);
      expect(result.stdout).toBe('');
    });

    const [help, purgeHelp, json, bare] = await Promise.all([
      runCli(['--help'], env),
      runCli(['dlq', 'purge', '--help'], env),
      runCli(['--json', 'frobnicate'], env),
      runCli([], env),
    ]);
    expect(help.code).toBe(0);
    expect(help.stdout).toContain('Exit codes:');
    expect(purgeHelp.code).toBe(0);
    expect(purgeHelp.stdout).toMatch(/--yes[\s\S]*Examples:\n {2}\$ eventrail dlq purge billing/);
    expect(json.code).toBe(2);
    expect(parseJson(json)).toEqual({ error: { name: 'CliUsageError', message: expect.stringContaining("unknown command 'frobnicate'") } });
    expect(bare.code).toBe(2);
    expect(bare.stderr).toContain('Usage: eventrail');
  });
});
