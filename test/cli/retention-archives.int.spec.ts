import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { cliEnv, outcome, runCli, useCliSuite } from './cli.harness';

describe('eventrail retention archives: the archive variables', () => {
  const suite = useCliSuite('cli-rar');
  let dir: string;

  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'eventrail-cli-archives-'));
    await suite.start([], 1);
  });
  afterEach(() => rm(dir, { recursive: true, force: true }));

  it('without them, exits 2 with a message that names the variables to set', async () => {
    const result = await runCli(['retention', 'archives'], cliEnv(suite.prefix));
    expect(result.code).toBe(2);
    expect(result.stdout).toBe('');
    for (const variable of ['RETENTION_ARCHIVE_DRIVER=fs', 'RETENTION_ARCHIVE_DIR', 'RETENTION_ARCHIVE_DRIVER=s3', 'RETENTION_S3_BUCKET']) {
      expect(result.stderr).toContain(variable);
    }
    expect(result.stderr).not.toContain('got undefined');
    expect(result.stderr).not.toContain('retention.archive');
  });

  it('with the variables of its help example, lists the (empty) archive', async () => {
    const result = await runCli(
      ['retention', 'archives'],
      cliEnv(suite.prefix, { RETENTION_ARCHIVE_DRIVER: 'fs', RETENTION_ARCHIVE_DIR: dir }),
    );
    expect(outcome(result)).toEqual({ code: 0, stderr: '' });
    expect(result.stdout.trim()).toBe('No archives.');
    const help = await runCli(['retention', 'archives', '--help'], cliEnv(suite.prefix));
    expect(help.stdout).toContain('RETENTION_ARCHIVE_DRIVER=fs RETENTION_ARCHIVE_DIR=');
  });
});
