import { formatCommandLine } from '../../lib/cli/runtime/command-line.format';
import { testRedisUrl } from '../support/helpers';
import { freePort } from '../support/redis-server';
import { cliEnv, CliResult, outcome, parseJson, runCli, runPrinted, useCliSuite } from './cli.harness';

/** A password with a comma, which once split the URL into "several nodes" and printed both halves. */
const PASSWORD = 'a,b';

/** Neither the password nor a piece of it, on stdout or stderr. */
function expectNoPassword(result: CliResult): void {
  for (const text of [result.stdout, result.stderr]) {
    expect(text).not.toContain(PASSWORD);
    expect(text).not.toContain('b@');
  }
}

describe('eventrail CLI: connection URLs', () => {
  const suite = useCliSuite('cli-url');

  /** The test Redis with `default:<PASSWORD>`: its default user has no password, so it takes any. */
  const withPassword = (): string => {
    const { host } = new URL(testRedisUrl());
    return `redis://default:${PASSWORD}@${host}`;
  };

  it('connects with a comma in the password, from the flag or the environment, and shows it as ***', async () => {
    await suite.start([]);
    const url = withPassword();
    const [flag, json, env, verbose] = await Promise.all([
      runCli(['--redis-url', url, 'status'], cliEnv(suite.prefix)),
      runCli(['--redis-url', url, 'status', '--json'], cliEnv(suite.prefix)),
      runCli(['status'], cliEnv(suite.prefix, { EVENTRAIL_REDIS_URL: url })),
      runCli(['--redis-url', url, '--verbose', 'groups'], cliEnv(suite.prefix)),
    ]);
    const shown = url.replace(PASSWORD, '***');
    for (const result of [flag, env]) {
      expect(outcome(result)).toEqual({ code: 0, stderr: '' });
      expect(result.stdout).toContain(shown);
    }
    expect(json.code).toBe(0);
    expect(parseJson<{ redis: string }>(json).redis).toBe(shown);
    expect(verbose.code).toBe(0);
    [flag, json, env, verbose].forEach(expectNoPassword);
  });

  it('never prints the password when the connection fails or the URL is wrong, with or without --json', async () => {
    const port = await freePort();
    const refused = `redis://default:${PASSWORD}@127.0.0.1:${port}`;
    const shown = `redis://default:***@127.0.0.1:${port}`;
    const cases: Array<{ args: string[]; env?: Record<string, string>; code: number; message: string }> = [
      { args: ['--redis-url', refused, 'status'], code: 1, message: `cannot connect to ${shown} (connect ECONNREFUSED` },
      { args: ['status'], env: { EVENTRAIL_REDIS_URL: refused }, code: 1, message: `cannot connect to ${shown} (` },
      { args: ['--cluster', '--redis-url', refused, 'status'], code: 1, message: `cannot connect to Redis Cluster seeds ${shown} (` },
      {
        args: ['--redis-url', `${refused},redis://127.0.0.1:${port}`, 'status'],
        code: 2,
        message: `lists several nodes (${shown},redis://127.0.0.1:${port})`,
      },
      { args: ['--cluster', '--redis-url', `${refused}/3`, 'status'], code: 2, message: `Invalid cluster seed URL "${shown}/3"` },
      // A `/` the password should have percent-encoded: the URL does not parse, so all of its userinfo goes.
      {
        args: ['--cluster', '--redis-url', `redis://default:${PASSWORD}/c@127.0.0.1:${port}`, 'status'],
        code: 2,
        message: `Invalid cluster seed URL "redis://***@127.0.0.1:${port}"`,
      },
      {
        args: ['--redis-url', `redis://default:${PASSWORD}/c@127.0.0.1:${port}`, 'status'],
        code: 2,
        message: `Invalid Redis URL "redis://***@127.0.0.1:${port}"`,
      },
      { args: ['--redis-url', `redis://127.0.0.1:${port}?password=${PASSWORD}`, 'status'], code: 1, message: '?password=*** (' },
      // Commander quotes what it did not understand: a URL typed where the command goes.
      { args: [refused, 'status'], code: 2, message: `unknown command '${shown}'` },
    ];
    const runs = cases.flatMap(({ args, env }) =>
      [false, true].map((json) => runCli(json ? ['--json', ...args] : args, cliEnv(suite.prefix, env))),
    );
    const results = await Promise.all(runs);
    cases.forEach(({ args, code, message }, i) => {
      const [human, json] = [results[2 * i], results[2 * i + 1]];
      expect({ args, ...outcome(human) }).toEqual({ args, code, stderr: expect.stringContaining(message) });
      expect(human.stderr).toMatch(/^eventrail: [^\n]+\n$/);
      expect({ args, code: json.code }).toEqual({ args, code });
      expect(parseJson<{ error: { message: string } }>(json).error.message).toContain(message);
      expectNoPassword(human);
      expectNoPassword(json);
    });
  });

  it('prints `--` before a positional argument that starts with "-", and the printed line runs as such', async () => {
    await suite.start([]);
    const words = { command: ['dlq', 'list'], positionals: ['-weird'], options: ['--count', '2', '--after', '1-0'] };
    const printed = formatCommandLine({ prefix: suite.prefix }, words);
    expect(printed.text).toBe(`eventrail --prefix ${suite.prefix} dlq list --count 2 --after 1-0 -- -weird`);
    expect(formatCommandLine({}, { ...words, positionals: ['billing'] }).text).toBe('eventrail dlq list billing --count 2 --after 1-0');

    // Without `--`, commander takes the group for an option; with it, the command reaches the log and looks the group up.
    const [bare, run] = await Promise.all([
      runCli(['dlq', 'list', '-weird'], cliEnv(suite.prefix)),
      runPrinted(printed.text, cliEnv(suite.prefix)),
    ]);
    expect(outcome(bare)).toEqual({ code: 2, stderr: "eventrail: unknown option '-weird'\n" });
    expect(run.stderr).toContain('"-weird"');
    expect(run.stderr).not.toContain('unknown option');
  });
});
