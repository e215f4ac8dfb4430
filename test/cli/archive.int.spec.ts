import { INestApplicationContext, Injectable } from '@nestjs/common';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ArchiveObject, EventrailAdmin, EventrailMessage, EventrailPublisher, OnEvent, RetentionRunResult } from '../../lib';
import { waitFor } from '../support/helpers';
import { cliEnv, outcome, parseJson, runCli, useCliSuite } from './cli.harness';

const handled: number[] = [];

@Injectable()
class Ledger {
  @OnEvent('order.placed', 'ledger')
  book(message: EventrailMessage<{ n: number }>): void {
    handled.push(message.data.n);
  }
}

describe('eventrail CLI: archive and restore', () => {
  const suite = useCliSuite('cli-arc');
  let dir: string;
  let app: INestApplicationContext;

  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'eventrail-cli-archive-'));
    handled.length = 0;
    app = await suite.start([Ledger], 1);
  });
  afterEach(() => rm(dir, { recursive: true, force: true }));

  it('archives while trimming, lists the archives, and restores them by name and by range for one group', async () => {
    await app.get(EventrailPublisher).publishMany([1, 2, 3, 4, 5].map((n) => ({ event: 'order.placed', data: { n } })));
    const admin = app.get(EventrailAdmin);
    await waitFor(async () => handled.length === 5 && (await admin.group('ledger')).lag === 0, 'ledger caught up');
    const env = cliEnv(suite.prefix, { RETENTION_STREAM_MAX_LEN: '0', RETENTION_ARCHIVE_DRIVER: 'fs', RETENTION_ARCHIVE_DIR: dir });

    const run = await runCli(['retention', 'run', '--yes', '--json'], env);
    expect(outcome(run)).toEqual({ code: 0, stderr: '' });
    const [partition] = parseJson<RetentionRunResult>(run).partitions;
    expect(partition).toMatchObject({ partition: 0, trimmed: 5, archived: [expect.objectContaining({ count: 5 })] });
    expect((await admin.stats()).partitions[0].length).toBe(0);

    const list = await runCli(['retention', 'archives', '--json'], env);
    expect(outcome(list)).toEqual({ code: 0, stderr: '' });
    const archives = parseJson<ArchiveObject[]>(list);
    expect(archives).toEqual([{ name: partition.archived[0].name, partition: 0, firstId: expect.any(String), lastId: expect.any(String) }]);

    const byName = await runCli(['dlq', 'restore', 'ledger', '--archive', archives[0].name, '--json'], env);
    expect(outcome(byName)).toEqual({ code: 0, stderr: '' });
    expect(parseJson(byName)).toEqual({ group: 'ledger', restored: 5 });
    await waitFor(
      () => handled.length === 10,
      () => `handled ${JSON.stringify(handled)}`,
    );

    const byRange = await runCli(['dlq', 'restore', 'ledger', '--from', '1970-01-01T00:00:00Z', '--partition', '0'], env);
    expect(outcome(byRange)).toEqual({ code: 0, stderr: '' });
    expect(byRange.stdout).toBe('Restored 5 entries for group "ledger".\n');
    await waitFor(() => handled.length === 15, 'restored by range');
    expect(handled).toEqual([1, 2, 3, 4, 5, 1, 2, 3, 4, 5, 1, 2, 3, 4, 5]);
    // Restored entries are addressed to the group: other groups skip them.
    const page = await admin.readLog(0);
    expect(new Set(page.entries.map((e) => e.to))).toEqual(new Set(['ledger']));
  });
});
