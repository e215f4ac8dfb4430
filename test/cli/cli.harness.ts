import type { INestApplicationContext, Provider } from '@nestjs/common';
import Redis from 'ioredis';
import { ChildProcess, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { createApp } from '../support/app';
import { deletePrefix, testRedisUrl, uniquePrefix, waitFor } from '../support/helpers';

/** The built bin: the tests run what users run. */
export const CLI = join(__dirname, '..', '..', 'dist', 'cli', 'main.js');

export function assertBuilt(): void {
  if (!existsSync(CLI)) throw new Error(`${CLI} is missing: run npm run build before the CLI tests`);
}

export interface CliResult {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
  /** Wall time of the run, in ms. */
  ms: number;
}

/**
 * The child's environment: the test Redis and `prefix`, and none of the
 * caller's EVENTRAIL_* / RETENTION_* variables, so a developer's shell cannot change the outcome.
 */
export function cliEnv(prefix: string, extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [name, value] of Object.entries(process.env)) {
    if (!/^(EVENTRAIL_|RETENTION_)/.test(name)) env[name] = value;
  }
  return { ...env, EVENTRAIL_REDIS_URL: testRedisUrl(), EVENTRAIL_PREFIX: prefix, ...extra };
}

/** Every child still running, killed by `killAll` (afterEach) and on exit, so a failed test leaves none behind. */
const alive = new Set<ChildProcess>();
process.once('exit', () => alive.forEach((child) => child.kill('SIGKILL')));

/** A running `eventrail` process, with its output collected as it comes. */
export class CliProcess {
  stdout = '';
  stderr = '';
  readonly exited: Promise<CliResult>;
  private readonly child: ChildProcess;

  /**
   * `command` is the bin by default; `runPrinted` runs a shell instead. With `stderrClosed`, the read end of its
   * stderr pipe is closed at once (a reader that went away): its writes there fail with EPIPE.
   */
  constructor(
    args: readonly string[],
    env: NodeJS.ProcessEnv,
    input = '',
    command: readonly string[] = [process.execPath, CLI],
    stderrClosed = false,
  ) {
    const started = Date.now();
    this.child = spawn(command[0], [...command.slice(1), ...args], { env, stdio: ['pipe', 'pipe', 'pipe'] });
    alive.add(this.child);
    this.child.stdout?.setEncoding('utf8').on('data', (chunk: string) => (this.stdout += chunk));
    if (stderrClosed) this.child.stderr?.destroy();
    else this.child.stderr?.setEncoding('utf8').on('data', (chunk: string) => (this.stderr += chunk));
    // stdin is a pipe, not a terminal: destructive commands must refuse without --yes rather than wait for an answer.
    this.child.stdin?.end(input);
    this.exited = new Promise((resolve) =>
      this.child.once('close', (code, signal) => {
        alive.delete(this.child);
        resolve({ code, signal, stdout: this.stdout, stderr: this.stderr, ms: Date.now() - started });
      }),
    );
  }

  /** Polls the collected output until `predicate` holds. */
  async waitForOutput(predicate: (p: CliProcess) => boolean, what: string, timeoutMs = 15_000): Promise<void> {
    await waitFor(
      () => predicate(this) || this.child.exitCode !== null,
      () => `${what}; stdout: ${this.stdout} stderr: ${this.stderr}`,
      timeoutMs,
    );
    if (!predicate(this)) throw new Error(`eventrail exited (${this.child.exitCode}) before ${what}; stderr: ${this.stderr}`);
  }

  signal(signal: NodeJS.Signals): void {
    this.child.kill(signal);
  }
}

/** Runs `eventrail <args>` to completion. */
export function runCli(args: readonly string[], env: NodeJS.ProcessEnv, input = ''): Promise<CliResult> {
  return new CliProcess(args, env, input).exited;
}

/** Runs `eventrail <args>` to completion with the reader of its stderr gone (`cmd 2>&1 >out | head -0`). */
export function runCliStderrClosed(args: readonly string[], env: NodeJS.ProcessEnv): Promise<CliResult> {
  return new CliProcess(args, env, '', undefined, true).exited;
}

/**
 * Runs a command line the CLI printed for the operator (`eventrail ...`,
 * quoted for a shell) as an operator would paste it: through /bin/sh, with
 * `eventrail` standing for the built bin.
 */
export function runPrinted(commandLine: string, env: NodeJS.ProcessEnv): Promise<CliResult> {
  const script = `eventrail() { "$CLI_TEST_NODE" "$CLI_TEST_BIN" "$@"; }\n${commandLine}`;
  return new CliProcess(['-c', script], { ...env, CLI_TEST_NODE: process.execPath, CLI_TEST_BIN: CLI }, '', ['/bin/sh']).exited;
}

export function killAll(): void {
  alive.forEach((child) => child.kill('SIGKILL'));
  alive.clear();
}

/** The one JSON document on stdout, with the output in the failure message when it is not one. */
export function parseJson<T>(result: CliResult): T {
  try {
    return JSON.parse(result.stdout) as T;
  } catch {
    throw new Error(`stdout is not one JSON document (exit ${result.code}):\n${result.stdout}\nstderr:\n${result.stderr}`);
  }
}

/** Exit code with the output attached, so a failed expectation shows why. */
export function outcome(result: CliResult): { code: number | null; stderr: string } {
  return { code: result.code, stderr: result.stderr };
}

/**
 * Text that moves around what a line shows: a right-to-left override (`exe.txt` would read as `txt.exe`),
 * an isolate, the bidirectional marks and embeddings, and the line and paragraph separators.
 */
export const BIDI = '\u202eexe.txt\u202c\u2066\u2069\u200e\u200f\u061c\u202a\u202b\u202d\u2067\u2068\u2028line\u2029para';
/** BIDI as every output shows it: human text and JSON alike. */
export const BIDI_SHOWN =
  '\\u202eexe.txt\\u202c\\u2066\\u2069\\u200e\\u200f\\u061c\\u202a\\u202b\\u202d\\u2067\\u2068\\u2028line\\u2029para';
/** What a hostile producer could put in a payload: retitle the terminal, clear it, CSI in C1, a forged line, DEL, BIDI. */
export const HOSTILE = `\u001b]0;pwned\u0007\u001b[2J\u009b31m\r\nforged\u007f${BIDI}`;
/** HOSTILE as the human output shows it. */
export const HOSTILE_SHOWN = `\\x1b]0;pwned\\x07\\x1b[2J\\u009b31m\\r\\nforged\\x7f${BIDI_SHOWN}`;
/** Any control character but a line break, or a bidirectional control or separator. */
// eslint-disable-next-line no-control-regex
export const RAW_CONTROL = /[\u0000-\u0009\u000b-\u001f\u007f-\u009f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029]/;

export function escapeRegExp(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

/** What `useCliSuite` keeps for the running test. */
export interface CliSuite {
  /** A client of the test Redis, for setting up and checking keys. */
  readonly redis: Redis;
  /** The running test's key prefix. */
  readonly prefix: string;
  /** The apps started by this test and not stopped yet, in start order. */
  readonly apps: readonly INestApplicationContext[];
  /** Boots the module on the test's prefix with these providers (handlers); closed after the test. */
  start(providers: Provider[], partitions?: number): Promise<INestApplicationContext>;
  /** Closes one app, or every app, before the test ends (a group without live members). */
  stop(app?: INestApplicationContext): Promise<void>;
}

/**
 * The hooks every CLI suite shares: the bin must be built, each test gets a
 * prefix of its own and in-process apps that make its data, and after it
 * every CLI child is killed, the apps closed and the prefix's keys deleted.
 */
export function useCliSuite(name: string): CliSuite {
  let apps: INestApplicationContext[] = [];
  const suite = {
    redis: undefined as unknown as Redis,
    prefix: '',
    get apps(): readonly INestApplicationContext[] {
      return apps;
    },
    async start(providers: Provider[], partitions = 2): Promise<INestApplicationContext> {
      const app = await createApp({ prefix: suite.prefix, partitions }, providers);
      apps.push(app);
      return app;
    },
    async stop(app?: INestApplicationContext): Promise<void> {
      const closing = app ? apps.filter((a) => a === app) : apps;
      apps = app ? apps.filter((a) => a !== app) : [];
      await Promise.all(closing.map((a) => a.close()));
    },
  };
  beforeAll(() => {
    assertBuilt();
    suite.redis = new Redis(testRedisUrl());
  });
  beforeEach(() => {
    suite.prefix = uniquePrefix(name);
  });
  afterEach(async () => {
    killAll();
    await suite.stop();
    await deletePrefix(suite.redis, suite.prefix);
  });
  afterAll(() => suite.redis.disconnect());
  return suite;
}
