import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { EventrailPublisher, RetentionRunResult } from '../../lib';
import { EventrailKeys } from '../../lib/redis/keys';
import { CLI, CliProcess, CliResult, cliEnv, outcome, parseJson, runCli, useCliSuite } from './cli.harness';

/**
 * `eventrail retention run` on a terminal: util-linux `script` gives the bin a
 * pseudo-terminal as stdin and stdout, and passes `answer` on to it.
 */
function runOnTerminal(args: readonly string[], env: NodeJS.ProcessEnv, answer: string): Promise<CliResult> {
  const line = [process.execPath, CLI, ...args].map((word) => `'${word}'`).join(' ');
  return new CliProcess([], env, answer, ['script', '--quiet', '--return', '--command', line, '/dev/null']).exited;
}

describe('eventrail retention run: confirmation, and the archive it lacks', () => {
  const suite = useCliSuite('cli-ret');
  let dir: string;

  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'eventrail-cli-retention-'));
  });
  afterEach(() => rm(dir, { recursive: true, force: true }));

  const length = (): Promise<number> => suite.redis.xlen(new EventrailKeys(suite.prefix, 1).stream(0));
  const publish = async (count: number): Promise<void> => {
    const publisher = (suite.apps[0] ?? (await suite.start([], 1))).get(EventrailPublisher);
    await publisher.publishMany(Array.from({ length: count }, (_, n) => ({ event: 'metric.sampled', data: { n } })));
  };

  it('refuses without --yes when stdin is not a terminal, and trims nothing', async () => {
    await publish(5);
    const env = cliEnv(suite.prefix);
    const refused = await Promise.all([
      runCli(['retention', 'run', '--max-len', '0'], env),
      runCli(['retention', 'run', '--json'], cliEnv(suite.prefix, { RETENTION_STREAM_KEEP_MS: '1' })),
    ]);
    for (const result of refused) expect(outcome(result)).toEqual({ code: 2, stderr: expect.stringContaining('pass --yes') });
    expect(await length()).toBe(5);

    const done = await runCli(['retention', 'run', '--max-len', '0', '--yes', '--json'], env);
    expect(outcome(done)).toEqual({ code: 0, stderr: '' });
    expect(parseJson<RetentionRunResult>(done).partitions[0].trimmed).toBe(5);
    expect(await length()).toBe(0);
  });

  it('asks on a terminal: no keeps the log, yes trims it', async () => {
    await publish(5);
    const env = cliEnv(suite.prefix);
    const declined = await runOnTerminal(['retention', 'run', '--max-len', '0'], env, 'n\n');
    expect(declined.code).toBe(1);
    expect(declined.stdout).toContain('Trim the log for good (keep at most 0 entries per partition; no archive;');
    expect(declined.stdout).toContain('Not confirmed: did not run a retention cycle; nothing was changed');
    expect(await length()).toBe(5);

    const accepted = await runOnTerminal(['retention', 'run', '--max-len', '0'], env, 'y\n');
    expect(accepted.code).toBe(0);
    expect(await length()).toBe(0);
  });

  it('without the archive settings, keeps what the archive lacks unless --allow-unarchived-trim', async () => {
    await publish(5);
    const archiving = cliEnv(suite.prefix, { RETENTION_ARCHIVE_DRIVER: 'fs', RETENTION_ARCHIVE_DIR: dir });
    const archived = await runCli(['retention', 'run', '--max-len', '0', '--yes', '--json'], archiving);
    expect(outcome(archived)).toEqual({ code: 0, stderr: '' });
    expect(parseJson<RetentionRunResult>(archived).partitions[0]).toMatchObject({ trimmed: 5, archived: [expect.anything()] });
    await publish(5);

    const bare = await runCli(['retention', 'run', '--max-len', '0', '--yes', '--json'], cliEnv(suite.prefix));
    expect(bare.code).toBe(1);
    expect(parseJson<RetentionRunResult>(bare).partitions[0]).toMatchObject({
      trimmed: 0,
      error: expect.stringContaining('are not archived (this log is archived to fs:'),
    });
    expect(await length()).toBe(5);

    const allowed = await runCli(
      ['retention', 'run', '--max-len', '0', '--allow-unarchived-trim', '--yes', '--json'],
      cliEnv(suite.prefix),
    );
    expect(outcome(allowed)).toEqual({ code: 0, stderr: '' });
    expect(await length()).toBe(0);
  });
});
