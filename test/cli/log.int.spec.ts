import { Injectable } from '@nestjs/common';
import { EventrailAdmin, EventrailMessage, EventrailPublisher, OnEvent, PublishResult, RetentionRunResult } from '../../lib';
import type { LogEntry } from '../../lib/admin/admin.types';
import { waitFor } from '../support/helpers';
import {
  BIDI_SHOWN,
  cliEnv,
  CliProcess,
  HOSTILE,
  HOSTILE_SHOWN,
  outcome,
  parseJson,
  RAW_CONTROL,
  runCli,
  useCliSuite,
} from './cli.harness';

@Injectable()
class Shipping {
  @OnEvent('order.paid', 'shipping')
  ship(_message: EventrailMessage): void {}
}

@Injectable()
class Audit {
  @OnEvent('order.paid', 'audit')
  record(_message: EventrailMessage): void {}
}

describe('eventrail CLI: publish, tail, retention, prune-stale', () => {
  const suite = useCliSuite('cli-log');

  it('publishes into a new log with the given partition count, and into an existing one from stdin', async () => {
    const env = cliEnv(suite.prefix);
    const created = await runCli(
      ['publish', 'order.created', '{"total":42}', '--key', 'o-1', '--header', 'trace=abc', '--partitions', '3', '--json'],
      env,
    );
    expect(outcome(created)).toEqual({ code: 0, stderr: '' });
    const result = parseJson<PublishResult>(created);
    expect(result).toEqual({ id: expect.any(String), partition: expect.any(Number), offset: expect.stringMatching(/^\d+-\d+$/) });

    const [fromStdin, mismatch] = await Promise.all([
      runCli(['publish', 'order.paid', '-', '--partition', '2'], env, '{"paid":true}'),
      runCli(['publish', 'order.paid', '{}', '--partitions', '5'], env),
    ]);
    expect(outcome(fromStdin)).toEqual({ code: 0, stderr: '' });
    expect(fromStdin.stdout).toMatch(/^Published:\s+order\.paid\nEvent id:\s+\S+\nPartition:\s+2\nOffset:\s+\d+-\d+\n$/);
    expect(outcome(mismatch)).toEqual({ code: 1, stderr: expect.stringContaining('has 3 partition(s), not 5') });

    // The module refuses any other partition count than the log's: booting with 3 proves the CLI created it so.
    const admin = (await suite.start([], 3)).get(EventrailAdmin);
    const page = await admin.readLog(result.partition);
    expect(page.entries).toEqual([
      expect.objectContaining({
        offset: result.offset,
        id: result.id,
        event: 'order.created',
        key: 'o-1',
        data: { total: 42 },
        headers: { trace: 'abc' },
      }),
    ]);
    const offset = /Offset:\s+(\S+)/.exec(fromStdin.stdout)?.[1] as string;
    expect((await admin.readLog(2, { from: offset })).entries[0]).toMatchObject({ event: 'order.paid', data: { paid: true } });
  });

  it('tails events appended after it started, filtered by type or by group, and stops on SIGINT/SIGTERM with 0', async () => {
    const app = await suite.start([Shipping]);
    const publisher = app.get(EventrailPublisher);
    const env = cliEnv(suite.prefix);
    const byEvent = new CliProcess(['tail', '--event', 'order.created', '--json'], env);
    const byGroup = new CliProcess(['tail', '--group', 'shipping'], env);
    await Promise.all([byEvent, byGroup].map((tail) => tail.waitForOutput((p) => p.stderr.includes('Tailing'), 'the tail is ready')));
    expect(byGroup.stderr).toContain('events order.paid');

    // Same key, same partition: the skipped event comes before the printed one, so its absence is meaningful.
    const [ignored, created, paid] = await publisher.publishMany([
      { event: 'order.ignored', data: { n: 0 }, key: 'o-7' },
      { event: 'order.created', data: { n: 1 }, key: 'o-7' },
      { event: 'order.paid', data: { n: 2 }, key: 'o-7' },
    ]);
    await byEvent.waitForOutput((p) => p.stdout.includes(created.id), 'order.created printed');
    await byGroup.waitForOutput((p) => p.stdout.includes(paid.id), 'order.paid printed');

    const lines = byEvent.stdout.trimEnd().split('\n');
    expect(lines.map((line) => JSON.parse(line) as LogEntry)).toEqual([
      expect.objectContaining({ offset: created.offset, id: created.id, event: 'order.created', key: 'o-7', data: { n: 1 } }),
    ]);
    expect(byGroup.stdout).toMatch(
      new RegExp(`^\\d{4}-\\d\\d-\\d\\dT\\S+Z  p${paid.partition}  ${paid.offset}  order\\.paid  id=${paid.id}  key=o-7  \\{"n":2\\}\\n$`),
    );
    expect(byGroup.stdout).not.toContain(ignored.id);

    byEvent.signal('SIGINT');
    byGroup.signal('SIGTERM');
    const [eventExit, groupExit] = await Promise.all([byEvent.exited, byGroup.exited]);
    expect(outcome(eventExit)).toEqual({ code: 0, stderr: expect.stringMatching(/^Tailing[^\n]+\n$/) });
    expect(outcome(groupExit)).toEqual({ code: 0, stderr: expect.stringMatching(/^Tailing[^\n]+\n$/) });
  });

  it('tails a hostile entry as one escaped line, and intact with --json', async () => {
    const publisher = (await suite.start([])).get(EventrailPublisher);
    const env = cliEnv(suite.prefix);
    const human = new CliProcess(['tail'], env);
    const json = new CliProcess(['tail', '--json'], env);
    await Promise.all([human, json].map((tail) => tail.waitForOutput((p) => p.stderr.includes('Tailing'), 'the tail is ready')));

    const sent = await publisher.publish('order.created', { note: HOSTILE }, { key: `k-${HOSTILE}`, headers: { trace: HOSTILE } });
    await human.waitForOutput((p) => p.stdout.includes(sent.id), 'the entry printed');
    await json.waitForOutput((p) => p.stdout.includes(sent.id), 'the entry printed as JSON');

    expect(human.stdout).not.toMatch(RAW_CONTROL);
    expect(human.stdout.split('\n')).toHaveLength(2); // one line, then the end
    expect(human.stdout).toContain(
      `key=k-${HOSTILE_SHOWN}  {"note":"\\u001b]0;pwned\\u0007\\u001b[2J\\u009b31m\\r\\nforged\\x7f${BIDI_SHOWN}"}\n`,
    );

    expect(json.stdout).not.toMatch(RAW_CONTROL);
    expect(JSON.parse(json.stdout) as LogEntry).toMatchObject({
      id: sent.id,
      key: `k-${HOSTILE}`,
      data: { note: HOSTILE },
      headers: { trace: HOSTILE },
    });
    human.signal('SIGINT');
    json.signal('SIGINT');
    await Promise.all([human.exited, json.exited]);
  });

  it('runs a retention cycle from RETENTION_* variables or flags', async () => {
    const app = await suite.start([]);
    await app.get(EventrailPublisher).publishMany(Array.from({ length: 10 }, (_, n) => ({ event: 'metric.sampled', data: { n } })));
    const admin = app.get(EventrailAdmin);

    const fromEnv = await runCli(['retention', 'run', '--yes', '--json'], cliEnv(suite.prefix, { RETENTION_STREAM_MAX_LEN: '4' }));
    expect(outcome(fromEnv)).toEqual({ code: 0, stderr: '' });
    const result = parseJson<RetentionRunResult>(fromEnv);
    expect(result).toMatchObject({ ran: true, staleGroups: [], deadLetters: [] });
    expect(result.partitions.map((p) => [p.partition, p.trimmed])).toEqual([
      [0, 6],
      [1, 0],
    ]);
    expect((await admin.stats()).partitions.map((p) => p.length)).toEqual([4, 0]);

    const [fromFlag, unlimited] = await Promise.all([
      runCli(['retention', 'run', '--max-len', '1', '--yes'], cliEnv(suite.prefix)),
      runCli(['retention', 'run', '--json'], cliEnv(`${suite.prefix}-none`)),
    ]);
    expect(outcome(fromFlag)).toEqual({ code: 0, stderr: '' });
    expect(fromFlag.stdout).toMatch(/^PARTITION\s+TRIMMED\s+ARCHIVED\s+MIN ID\s+HELD BACK BY\s+ERROR\n\s+0\s+3\s+0\s+\d+-\d+\s+-\s+-\n/);
    expect((await admin.stats()).partitions[0].length).toBe(1);
    expect(outcome(unlimited)).toEqual({ code: 1, stderr: expect.stringContaining('No retention limit is set') });
    expect(unlimited.stderr).toContain('No eventrail log');
  });

  it('prunes stale groups only with --yes, and never one with live members', async () => {
    const gone = await suite.start([Shipping]);
    const live = await suite.start([Audit]);
    await waitFor(async () => (await live.get(EventrailAdmin).groups()).length === 2, 'both groups registered');
    await suite.stop(gone);
    const names = async (): Promise<string[]> => (await live.get(EventrailAdmin).groups()).map((g) => g.name);
    const env = cliEnv(suite.prefix);

    const refused = await runCli(['prune-stale', '--stale-ms', '0'], env);
    expect(outcome(refused)).toEqual({ code: 2, stderr: expect.stringContaining('pass --yes') });
    expect(await names()).toEqual(['audit', 'shipping']);

    const pruned = await runCli(['prune-stale', '--stale-ms', '0', '--yes', '--json'], env);
    expect(outcome(pruned)).toEqual({ code: 0, stderr: '' });
    expect(parseJson(pruned)).toEqual({ pruned: ['shipping'] });
    // Even with --stale-ms 0, audit has a live member.
    expect(await names()).toEqual(['audit']);

    const nothing = await runCli(['prune-stale', '--yes'], env);
    expect(outcome(nothing)).toEqual({ code: 0, stderr: '' });
    expect(nothing.stdout).toBe('No stale groups.\n');
  });
});
