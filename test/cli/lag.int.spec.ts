import { Injectable } from '@nestjs/common';
import { EventrailAdmin, EventrailPublisher, GroupLag, LagReport, OnEvent } from '../../lib';
import { createRemoteNamespace, netnsUnavailable, RemoteNamespace } from '../dashboard/remote-namespace';
import { parseExposition, promtoolProblems, promtoolUnavailable, valueOf } from '../metrics/exposition';
import { waitFor } from '../support/helpers';
import { cliEnv, CliProcess, outcome, parseJson, runCli, useCliSuite } from './cli.harness';

@Injectable()
class Billing {
  @OnEvent('order.placed', 'billing')
  bill(): void {}
}

@Injectable()
class Mailer {
  @OnEvent('order.placed', 'mailer')
  mail(): void {}
}

const TOKEN = 'exporter-token-for-tests';

describe('eventrail CLI: lag and the metrics exporter', () => {
  const suite = useCliSuite('cli-lag');

  /** Groups billing and mailer on 3 partitions, caught up, then no worker running; `perPartition` entries published after. */
  async function groupsWithoutWorkers(perPartition: readonly number[]): Promise<void> {
    const app = await suite.start([Billing, Mailer], 3);
    const publisher = app.get(EventrailPublisher);
    for (let p = 0; p < 3; p++) await publisher.publish('order.placed', {}, { partition: p });
    const admin = app.get(EventrailAdmin);
    await waitFor(async () => (await admin.groups()).every((g) => g.lag === 0 && g.partitions.every((s) => s.committed)), 'caught up');
    await suite.stop(app);
    const writer = await suite.start([], 3);
    for (const [p, count] of perPartition.entries())
      for (let i = 0; i < count; i++) await writer.get(EventrailPublisher).publish('order.placed', { i }, { partition: p });
  }

  /** Starts `eventrail metrics` and answers its base URL once it serves. */
  async function serve(args: string[], env = cliEnv(suite.prefix)): Promise<{ exporter: CliProcess; url: string }> {
    const exporter = new CliProcess(['metrics', '--listen', '0', ...args], env);
    await exporter.waitForOutput((p) => /on http:\/\/\S+:\d+ /.test(p.stderr), 'the exporter serves');
    return { exporter, url: /on (http:\/\/\S+:\d+) /.exec(exporter.stderr)![1] };
  }

  it('lag prints each group with no worker running, as JSON for scripts and as a table', async () => {
    await groupsWithoutWorkers([4, 0, 1]);
    const env = cliEnv(suite.prefix);
    const json = await runCli(['lag', '--json'], env);
    expect(outcome(json)).toEqual({ code: 0, stderr: '' });
    const report = parseJson<LagReport>(json);
    expect(Object.keys(report.groups)).toEqual(['billing', 'mailer']);
    expect(report.groups.billing).toEqual<GroupLag>({
      group: 'billing',
      lag: 5,
      lagCapped: false,
      parked: 0,
      parkedOldestAgeMs: 0,
      backlog: 5,
      members: 0,
      partitions: 3,
      usefulWorkers: 2,
      deadLetters: 0,
    });

    const one = parseJson<LagReport>(await runCli(['lag', '--group', 'mailer', '--json'], env));
    expect(Object.keys(one.groups)).toEqual(['mailer']);
    const table = await runCli(['lag'], env);
    expect(table.stdout).toMatch(/GROUP\s+LAG\s+PARKED\s+MEMBERS\s+USEFUL WORKERS\s+PARTITIONS/);
    expect(table.stdout).toMatch(/billing\s+5\s+0\s+0\s+2\s+3/);
    const unknown = await runCli(['lag', '--group', 'nobody'], env);
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toMatch(/nobody/);
  });

  it('metrics serves Prometheus text and the JSON of every group until SIGTERM, with no worker running', async () => {
    await groupsWithoutWorkers([2, 2, 0]);
    const { exporter, url } = await serve([]);
    const text = await (await fetch(`${url}/metrics`)).text();
    if (!promtoolUnavailable()) expect(promtoolProblems(text)).toBeNull();
    const samples = parseExposition(text);
    expect(valueOf(samples, 'eventrail_group_backlog', { group: 'billing' })).toBe(4);
    expect(valueOf(samples, 'eventrail_group_useful_workers', { group: 'mailer' })).toBe(2);
    expect(((await (await fetch(`${url}/lag/mailer`)).json()) as GroupLag).backlog).toBe(4);
    expect(((await (await fetch(`${url}/lag`)).json()) as LagReport).groups.billing.lag).toBe(4);
    expect((await fetch(`${url}/lag/nobody`)).status).toBe(404);
    expect((await fetch(`${url}/other`)).status).toBe(404);
    exporter.signal('SIGTERM');
    expect(outcome(await exporter.exited).code).toBe(0);
  });

  it('metrics refuses to bind beyond this machine without a token, and with one wants it on every request', async () => {
    await groupsWithoutWorkers([1, 0, 0]);
    const open = await runCli(['metrics', '--listen', '0', '--host', '0.0.0.0'], cliEnv(suite.prefix));
    expect(open.code).toBe(2);
    expect(open.stderr).toMatch(/EVENTRAIL_METRICS_TOKEN/);

    const { url } = await serve([], cliEnv(suite.prefix, { EVENTRAIL_METRICS_TOKEN: TOKEN }));
    expect((await fetch(`${url}/lag/billing`)).status).toBe(401);
    expect((await fetch(`${url}/metrics`, { headers: { authorization: 'Bearer wrong' } })).status).toBe(401);
    const answer = await fetch(`${url}/lag/billing`, { headers: { authorization: `Bearer ${TOKEN}` } });
    expect([answer.status, ((await answer.json()) as GroupLag).backlog]).toEqual([200, 1]);
  });

  const unavailable = netnsUnavailable();
  (unavailable ? describe.skip : describe)('from another machine', () => {
    let remote: RemoteNamespace;
    beforeAll(() => {
      remote = createRemoteNamespace();
    });
    afterAll(() => remote?.remove());

    it('answers only with the token', async () => {
      await groupsWithoutWorkers([1, 0, 0]);
      const env = cliEnv(suite.prefix, { EVENTRAIL_METRICS_TOKEN: TOKEN });
      const { exporter } = await serve(['--host', remote.hostAddress], env);
      const port = /:(\d+) /.exec(exporter.stderr)![1];
      const url = `http://${remote.hostAddress}:${port}`;
      expect((await remote.curl(`${url}/lag/billing`, ['-H', 'Host: localhost'])).status).toBe(401);
      const answer = await remote.curl(`${url}/lag/billing`, ['-H', `Authorization: Bearer ${TOKEN}`]);
      expect([answer.status, (JSON.parse(answer.body) as GroupLag).backlog]).toEqual([200, 1]);
    });
  });
});
