import { ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Redis from 'ioredis';
import { killQuietly } from './child-processes';
import { waitFor } from './helpers';
import { freePort, RedisServer, startRedisServer, waitUntilAnswers } from './redis-server';
import { TlsFiles, tlsServerArgs } from './tls-certs';

export const SENTINEL_MASTER_NAME = 'mymaster';

export interface SentinelSetup {
  /** The sentinels' addresses, for `redis: { sentinel: { sentinels, name } }`. */
  sentinels: Array<{ host: string; port: number }>;
  name: string;
  /** Every data node started (primary first); a killed one stays in the list. */
  nodes: RedisServer[];
  /** `host:port` the sentinels and clients know a node by: its TLS port in a TLS setup, else its port. */
  addressOf(node: RedisServer): string;
  /** `failover-timeout` the sentinels run with, in ms. */
  failoverTimeoutMs: number;
  /** `host:port` of the primary as a majority of the sentinels name it now. */
  primary(): Promise<string>;
  /** Asks one sentinel for a failover of the primary (`SENTINEL FAILOVER`). */
  failover(): Promise<void>;
  stop(): Promise<void>;
}

/**
 * A primary, `replicas` replicas and three `redis-sentinel` processes on
 * loopback, with `down-after-milliseconds 1000` so a dead primary is noticed
 * in a second. Each sentinel writes its state into a config file of its own
 * in a temp dir, as Sentinel requires. Resolves once every sentinel knows the
 * replicas and the other sentinels (a failover needs a majority of them).
 * With `tls`, the data nodes replicate and are monitored over a TLS port
 * (`tls-replication yes`, also in the sentinels' configs), and clients reach
 * them there; the sentinels themselves answer on plain ports. Each data node
 * keeps a plain port for the test's own readiness checks.
 */
export async function startSentinelSetup(replicas = 2, failoverTimeoutMs = 3_000, tls?: TlsFiles): Promise<SentinelSetup> {
  const dir = mkdtempSync(join(tmpdir(), 'eventrail-sentinel-'));
  const nodes: RedisServer[] = [];
  const sentinelProcesses: ChildProcess[] = [];
  const sentinelExits: Array<Promise<void>> = [];
  const replicationArgs = ['--repl-diskless-sync', 'yes', '--repl-diskless-sync-delay', '0', '--repl-diskless-load', 'swapdb'];
  const stop = async (): Promise<void> => {
    for (const child of sentinelProcesses) killQuietly(child.pid, 'SIGKILL');
    await Promise.all([...sentinelExits, ...nodes.map((n) => n.stop())]);
    rmSync(dir, { recursive: true, force: true });
  };
  const dataPorts = new Map<RedisServer, number>();
  const startNode = async (extra: string[]): Promise<RedisServer> => {
    const tlsPort = tls ? await freePort() : undefined;
    const tlsArgs = tls && tlsPort ? [...tlsServerArgs(tls, tlsPort, false), '--tls-replication', 'yes'] : [];
    const node = await startRedisServer(undefined, [...replicationArgs, ...tlsArgs, ...extra]);
    dataPorts.set(node, tlsPort ?? node.port);
    nodes.push(node);
    return node;
  };
  try {
    const primary = await startNode([]);
    const primaryPort = dataPorts.get(primary) as number;
    for (let i = 0; i < replicas; i++) await startNode(['--replicaof', '127.0.0.1', String(primaryPort)]);
    const ports = [await freePort(), await freePort(), await freePort()];
    for (const port of ports) {
      const config = join(dir, `sentinel-${port}.conf`);
      writeFileSync(
        config,
        [
          `port ${port}`,
          'bind 127.0.0.1',
          'protected-mode no',
          `dir ${tmpdir()}`,
          `sentinel monitor ${SENTINEL_MASTER_NAME} 127.0.0.1 ${primaryPort} 2`,
          `sentinel down-after-milliseconds ${SENTINEL_MASTER_NAME} 1000`,
          `sentinel failover-timeout ${SENTINEL_MASTER_NAME} ${failoverTimeoutMs}`,
          `sentinel parallel-syncs ${SENTINEL_MASTER_NAME} ${replicas}`,
          ...(tls
            ? [`tls-cert-file ${tls.serverCert}`, `tls-key-file ${tls.serverKey}`, `tls-ca-cert-file ${tls.caCert}`, 'tls-replication yes']
            : []),
          '',
        ].join('\n'),
      );
      // The temp dir as working directory: .ci/run finds a process left behind by an interrupted run through it.
      const child = spawn('redis-sentinel', [config], { cwd: tmpdir(), stdio: 'ignore', detached: true });
      child.unref();
      sentinelProcesses.push(child);
      sentinelExits.push(new Promise((resolve) => child.once('exit', () => resolve())));
      child.once('error', () => undefined);
    }
    process.once('exit', () => sentinelProcesses.forEach((child) => killQuietly(child.pid, 'SIGKILL')));
    await Promise.all(ports.map((port) => waitUntilAnswers(`redis://127.0.0.1:${port}`, 10_000)));
    await Promise.all(
      ports.map((port) =>
        askSentinel(port, async (sentinel) => {
          await waitFor(
            async () => {
              const known = (await sentinel.call('SENTINEL', 'REPLICAS', SENTINEL_MASTER_NAME)) as unknown[];
              const peers = (await sentinel.call('SENTINEL', 'SENTINELS', SENTINEL_MASTER_NAME)) as unknown[];
              return known.length === replicas && peers.length === ports.length - 1;
            },
            `sentinel ${port} to know ${replicas} replicas and ${ports.length - 1} other sentinels`,
            30_000,
            100,
          );
        }),
      ),
    );
    return {
      sentinels: ports.map((port) => ({ host: '127.0.0.1', port })),
      name: SENTINEL_MASTER_NAME,
      nodes,
      addressOf: (node) => `127.0.0.1:${dataPorts.get(node) ?? node.port}`,
      failoverTimeoutMs,
      async primary() {
        const answers = await Promise.all(
          ports.map((port) =>
            askSentinel(port, async (s) => {
              const [host, p] = (await s.call('SENTINEL', 'GET-MASTER-ADDR-BY-NAME', SENTINEL_MASTER_NAME)) as [string, string];
              return `${host}:${p}`;
            }).catch(() => undefined),
          ),
        );
        const counts = new Map<string, number>();
        for (const answer of answers) if (answer) counts.set(answer, (counts.get(answer) ?? 0) + 1);
        const [best] = [...counts].sort((a, b) => b[1] - a[1]);
        return best && best[1] >= 2 ? best[0] : 'unknown';
      },
      async failover() {
        await askSentinel(ports[0], (s) => s.call('SENTINEL', 'FAILOVER', SENTINEL_MASTER_NAME));
      },
      stop,
    };
  } catch (error) {
    await stop();
    throw error;
  }
}

async function askSentinel<T>(port: number, ask: (sentinel: Redis) => Promise<T>): Promise<T> {
  const sentinel = new Redis(port, '127.0.0.1', { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
  sentinel.on('error', () => undefined);
  try {
    await sentinel.connect();
    return await ask(sentinel);
  } finally {
    sentinel.disconnect();
  }
}
