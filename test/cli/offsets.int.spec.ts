import { Injectable } from '@nestjs/common';
import { EventrailAdmin, EventrailMessage, EventrailPublisher, OffsetResetResult, OnEvent, PublishResult } from '../../lib';
import { waitFor } from '../support/helpers';
import { cliEnv, outcome, parseJson, runCli, useCliSuite } from './cli.harness';

const seen: number[] = [];

@Injectable()
class Counter {
  @OnEvent('n.added', 'counter')
  count(message: EventrailMessage<{ n: number }>): void {
    seen.push(message.data.n);
  }
}

describe('eventrail CLI: offsets reset', () => {
  const suite = useCliSuite('cli-off');
  let published: PublishResult[];

  const committed = async (admin: EventrailAdmin): Promise<Array<string | null>> =>
    (await admin.group('counter')).partitions.map((p) => p.committed);

  beforeEach(async () => {
    seen.length = 0;
    const app = await suite.start([Counter]);
    published = await app.get(EventrailPublisher).publishMany([1, 2, 3, 4].map((n) => ({ event: 'n.added', data: { n }, partition: 0 })));
    await waitFor(() => seen.length === 4, 'first pass');
    await waitFor(async () => (await committed(app.get(EventrailAdmin)))[0] === published[3].offset, 'committed');
  });

  it('refuses while the group has live members, shows a dry run, and fences the members with --force', async () => {
    const admin = suite.apps[0].get(EventrailAdmin);
    const env = cliEnv(suite.prefix);
    const [refused, dry] = await Promise.all([
      runCli(['offsets', 'reset', 'counter', '--to-start', '--yes'], env),
      runCli(['offsets', 'reset', 'counter', '--to-id', published[2].offset, '--dry-run', '--json'], env),
    ]);
    expect(outcome(refused)).toEqual({ code: 1, stderr: expect.stringMatching(/live member.*pass --force/) });
    expect(outcome(dry)).toEqual({ code: 0, stderr: '' });
    const plan = parseJson<OffsetResetResult>(dry);
    expect(plan).toMatchObject({ group: 'counter', dryRun: true });
    expect(plan.partitions[0]).toEqual({ partition: 0, from: published[3].offset, to: expect.any(String) });
    expect(await committed(admin)).toEqual([published[3].offset, '0-0']);
    expect(seen).toEqual([1, 2, 3, 4]);

    const forced = await runCli(['offsets', 'reset', 'counter', '--to-id', published[2].offset, '--force', '--yes', '--json'], env);
    expect(outcome(forced)).toEqual({ code: 0, stderr: '' });
    expect(parseJson<OffsetResetResult>(forced)).toEqual({ ...plan, dryRun: false });
    // The running worker lost its lease, took the partition again from the new offset: entries 3 and 4 again.
    await waitFor(
      () => seen.length === 6,
      () => `seen ${JSON.stringify(seen)}`,
    );
    expect(seen).toEqual([1, 2, 3, 4, 3, 4]);
  });

  it('moves a stopped group to a time and to the end, printing the change', async () => {
    await suite.stop();
    const admin = (await suite.start([])).get(EventrailAdmin);
    const env = cliEnv(suite.prefix);

    const byTime = await runCli(['offsets', 'reset', 'counter', '--to-time', '1970-01-01T00:00:00Z', '--yes'], env);
    expect(outcome(byTime)).toEqual({ code: 0, stderr: '' });
    expect(byTime.stdout.split('\n')).toEqual([
      'Offsets of group "counter" moved:',
      'PARTITION   FROM' + ' '.repeat(published[3].offset.length - 4 + 3) + 'TO',
      `        0   ${published[3].offset}   0-0`,
      `        1   ${'0-0'.padEnd(published[3].offset.length)}   0-0`,
      '',
    ]);
    expect(await committed(admin)).toEqual(['0-0', '0-0']);

    const toEnd = await runCli(['offsets', 'reset', 'counter', '--to-end', '--yes', '--json'], env);
    expect(outcome(toEnd)).toEqual({ code: 0, stderr: '' });
    expect(parseJson<OffsetResetResult>(toEnd).partitions.map((p) => p.to)).toEqual([published[3].offset, '0-0']);
    expect(await committed(admin)).toEqual([published[3].offset, '0-0']);
  });
});
