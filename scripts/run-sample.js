#!/usr/bin/env node
// `npm run sample`: runs sample/main.ts against a Redis, starting a throwaway
// one when none is at hand.
//
//   EVENTRAIL_REDIS_URL set        -> that Redis
//   something answers on :6379     -> redis://127.0.0.1:6379
//   otherwise                      -> a local redis-server on a free port, no persistence,
//                                     stopped when the sample exits
//
// `npm run sample -- --smoke` (or SAMPLE_SMOKE=1) posts a few payments to the
// sample, waits until both consumer groups handled them and exits 0 (1 on failure).
//
// Other arguments are the node command line of the sample, instead of running
// sample/main.ts from TypeScript. `nest start` uses that: nest-cli.json names this
// script as the `exec` that runs the compiled entry, so the CLI runs
//   scripts/run-sample.js --enable-source-maps dist-sample/sample/main.js
'use strict';

const { spawn } = require('node:child_process');
const { createServer } = require('node:net');
const { tmpdir } = require('node:os');
const { join } = require('node:path');
const { Redis } = require('ioredis');

const ROOT = join(__dirname, '..');
const DEFAULT_URL = 'redis://127.0.0.1:6379';
const INSTALL_HINT = [
  'redis-server was not found on PATH, and no Redis answers on 127.0.0.1:6379.',
  'Install it, for example:',
  '  Debian/Ubuntu:  sudo apt-get install -y redis-server',
  '  macOS:          brew install redis',
  'or point the sample at a Redis you have: EVENTRAIL_REDIS_URL=redis://host:6379 npm run sample',
].join('\n');

/** The redis-server this script started, if any; stopped on every way out. */
let ownRedis;
/** The sample process. */
let sample;
let stopRequested = false;
/** When the first stop signal came (ms); see onSignal. */
let stopRequestedAt = 0;
/**
 * A repeat of a signal sooner than this is the same Ctrl-C delivered twice: once
 * by the terminal and once forwarded by a launcher (`nest start --no-shell`).
 */
const SAME_SIGNAL_MS = 1000;

function log(message) {
  console.log(`[run-sample] ${message}`);
}

/** True if a Redis at `url` answers PING within a second. */
async function answersPing(url) {
  const client = new Redis(url, {
    lazyConnect: true,
    connectTimeout: 1000,
    commandTimeout: 1000,
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
  });
  client.on('error', () => undefined);
  try {
    await client.connect();
    return (await client.ping()) === 'PONG';
  } catch {
    return false;
  } finally {
    client.disconnect();
  }
}

function freePort() {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

/** Starts redis-server on a free loopback port without persistence and waits until it answers. */
async function startRedisServer() {
  const port = await freePort();
  // --dir: nothing is written (no persistence), and .ci/run finds a server left
  // behind by an interrupted run through this working directory (its private TMPDIR).
  const args = ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', tmpdir()];
  // Its own process group: a Ctrl-C in the terminal must reach the sample first and
  // let it shut down cleanly (commit offsets, release leases) while Redis still runs.
  const child = spawn('redis-server', args, { stdio: ['ignore', 'pipe', 'pipe'], detached: true });
  let output = '';
  const keep = (chunk) => (output = (output + chunk).slice(-4000));
  child.stdout.on('data', keep);
  child.stderr.on('data', keep);
  const exited = new Promise((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })));
  const failed = new Promise((_, reject) => {
    child.once('error', (error) => reject(error.code === 'ENOENT' ? new Error(INSTALL_HINT) : error));
    void exited.then(({ code, signal }) => reject(new Error(`redis-server exited early (${signal ?? `code ${code}`}):\n${output}`)));
  });
  failed.catch(() => undefined);
  ownRedis = { child, exited, port };

  const url = `redis://127.0.0.1:${port}`;
  const deadline = Date.now() + 10_000;
  for (;;) {
    await Promise.race([failed, new Promise((resolve) => setTimeout(resolve, 50))]);
    if (await answersPing(url)) break;
    if (Date.now() > deadline) throw new Error(`redis-server on port ${port} did not answer within 10 s:\n${output}`);
  }
  // Nothing is read from the pipes any more; keep draining them so Redis never blocks on a full pipe.
  child.stdout.resume();
  child.stderr.resume();
  log(`started redis-server (pid ${child.pid}) at ${url}; it stops with the sample`);
  return url;
}

/** Stops the redis-server this script started: SIGTERM, then SIGKILL after 5 s. */
async function stopOwnRedis() {
  const redis = ownRedis;
  ownRedis = undefined;
  // No pid: the binary was never started (not installed).
  if (!redis || redis.child.pid === undefined || redis.child.exitCode !== null || redis.child.signalCode !== null) return;
  redis.child.kill('SIGTERM');
  const timer = setTimeout(() => redis.child.kill('SIGKILL'), 5000);
  await redis.exited;
  clearTimeout(timer);
  log(`stopped redis-server (pid ${redis.child.pid})`);
}

async function resolveRedisUrl() {
  if (process.env.EVENTRAIL_REDIS_URL) {
    log(`using EVENTRAIL_REDIS_URL=${process.env.EVENTRAIL_REDIS_URL}`);
    return process.env.EVENTRAIL_REDIS_URL;
  }
  if (await answersPing(DEFAULT_URL)) {
    log(`using the Redis that answers at ${DEFAULT_URL}`);
    return DEFAULT_URL;
  }
  return startRedisServer();
}

function onSignal(signal) {
  if (!sample) {
    stopRequested = true; // still looking for Redis: do not start the sample
    return;
  }
  if (sample.exitCode !== null || sample.signalCode !== null) return;
  if (stopRequested) {
    if (Date.now() - stopRequestedAt < SAME_SIGNAL_MS) return;
    log(`${signal} again: killing the sample`);
    sample.kill('SIGKILL');
    return;
  }
  stopRequested = true;
  stopRequestedAt = Date.now();
  // From a terminal the sample usually got the signal too; Nest ignores the repeat.
  sample.kill(signal);
}

async function main() {
  const args = process.argv.slice(2);
  const smoke = args.includes('--smoke') || process.env.SAMPLE_SMOKE === '1';
  const nodeArgs = args.filter((arg) => arg !== '--smoke');
  if (nodeArgs.length === 0) nodeArgs.push('-r', '@swc-node/register', join('sample', 'main.ts'));
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  // Last resort (an unexpected throw, process.exit): never leave redis-server behind.
  process.on('exit', () => ownRedis?.child.kill('SIGKILL'));

  const url = await resolveRedisUrl();
  if (stopRequested) return 0;
  const env = { ...process.env, EVENTRAIL_REDIS_URL: url, ...(smoke ? { SAMPLE_SMOKE: '1' } : {}) };
  sample = spawn(process.execPath, nodeArgs, { cwd: ROOT, env, stdio: 'inherit' });
  const { code, signal } = await new Promise((resolve, reject) => {
    sample.once('error', reject);
    sample.once('exit', (exitCode, exitSignal) => resolve({ code: exitCode, signal: exitSignal }));
  });
  // A sample stopped on request exits by the same signal after its clean shutdown: that is success.
  if (signal) return stopRequested && signal !== 'SIGKILL' ? 0 : 1;
  return code ?? 1;
}

main()
  .catch((error) => {
    console.error(`[run-sample] ${error instanceof Error ? error.message : String(error)}`);
    return 1;
  })
  .then(async (code) => {
    await stopOwnRedis();
    process.exit(code);
  });
