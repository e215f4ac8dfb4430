import { execFile, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import Redis from 'ioredis';
import { killQuietly } from './child-processes';
import { freePort, waitUntilAnswers } from './redis-server';
import { TlsFiles, tlsServerArgs } from './tls-certs';

const run = promisify(execFile);

/** The cluster bus of a node listens at its port + 10000. */
const BUS_PORT_OFFSET = 10_000;

/** True when nothing listens on `port` on loopback now. */
function canListen(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer();
    server.unref();
    server.once('error', () => resolve(false));
    server.listen(port, '127.0.0.1', () => server.close(() => resolve(true)));
  });
}

/**
 * A free port whose cluster bus port is free too. The OS hands out a free
 * port, but its bus port (+10000) can be another socket's, and that node
 * then exits at once (the likely cause of a cluster suite's setup failing
 * once in CI with "did not answer within 10000 ms: Connection is closed").
 */
async function freeNodePort(): Promise<number> {
  for (;;) {
    const port = await freePort();
    if (port + BUS_PORT_OFFSET <= 65_535 && (await canListen(port + BUS_PORT_OFFSET))) return port;
  }
}

export interface ClusterNode {
  port: number;
  /** Its TLS port, in a cluster started with `tls`: clients and the cluster bus use it; `port` stays plain for the tests' checks. */
  tlsPort?: number;
  /** Pid of the node's current process. */
  pid: number;
  /** Kills the node's process (SIGKILL by default). */
  kill(signal?: NodeJS.Signals): void;
  /** Starts the node again on the same port with the same cluster config (it rejoins, as a replica if it was failed over). */
  restart(): Promise<void>;
}

export interface RedisCluster {
  nodes: ClusterNode[];
  /** Startup nodes for ioredis. */
  startupNodes: Array<{ host: string; port: number }>;
  /** The masters as the cluster sees them now, with the slot ranges they serve. */
  masters(): Promise<Array<{ port: number; slots: Array<[number, number]> }>>;
  stop(): Promise<void>;
}

/**
 * Starts a real Redis Cluster on loopback: `masters` masters with one replica
 * each, `cluster-node-timeout 2000` so a failover takes a few seconds, and
 * waits until every node reports `cluster_state:ok`. With `tls`, every node
 * also serves a TLS port, the cluster bus and replication run over TLS
 * (`tls-cluster`, `tls-replication`), and `startupNodes` are the TLS ports.
 */
export async function startRedisCluster(masters = 3, tls?: TlsFiles): Promise<RedisCluster> {
  const dir = mkdtempSync(join(tmpdir(), 'eventrail-cluster-'));
  const nodes: ClusterNode[] = [];
  const exits = new Set<Promise<void>>();
  const launch = (port: number, tlsPort?: number): number => {
    const tlsArgs = tls && tlsPort ? [...tlsServerArgs(tls, tlsPort, false), '--tls-cluster', 'yes', '--tls-replication', 'yes'] : [];
    const child = spawn('redis-server', [...nodeArgs(port, dir), ...tlsArgs], { stdio: 'ignore', detached: true });
    child.unref();
    const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
    exits.add(exited);
    void exited.then(() => exits.delete(exited));
    return child.pid as number;
  };
  for (let i = 0; i < masters * 2; i++) {
    const port = await freeNodePort();
    // Over TLS the bus listens at the TLS port + 10000.
    const tlsPort = tls ? await freeNodePort() : undefined;
    const node: ClusterNode = {
      port,
      tlsPort,
      pid: launch(port, tlsPort),
      kill: (signal = 'SIGKILL') => void killQuietly(node.pid, signal),
      restart: async () => {
        node.pid = launch(port, tlsPort);
        await waitUntilAnswers(`redis://127.0.0.1:${port}`, 10_000);
      },
    };
    nodes.push(node);
  }
  const stop = async (): Promise<void> => {
    for (const node of nodes) node.kill('SIGKILL');
    await Promise.all([...exits]);
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    await Promise.all(nodes.map((n) => waitUntilAnswers(`redis://127.0.0.1:${n.port}`, 10_000)));
    // Over TLS the cluster bus listens at the TLS port + 10000: the nodes meet through their TLS ports.
    const cliTls = tls ? ['--tls', '--cacert', tls.caCert] : [];
    const createVia = nodes.map((n) => `127.0.0.1:${n.tlsPort ?? n.port}`);
    await run('redis-cli', [...cliTls, '--cluster', 'create', ...createVia, '--cluster-replicas', '1', '--cluster-yes'], {
      timeout: 60_000, // a cluster that never joins fails the setup (and stops its nodes) instead of hanging it
    });
    await waitForClusterOk(nodes.map((n) => n.port));
    // Every node's view, since a client asks whichever node it likes.
    await Promise.all(nodes.map((n) => waitForReplicas(n.port, masters)));
  } catch (error) {
    await stop();
    throw error;
  }
  const startupNodes = nodes.map((n) => ({ host: '127.0.0.1', port: n.tlsPort ?? n.port }));
  return {
    nodes,
    startupNodes,
    async masters() {
      const live = nodes.find((n) => isAlive(n.pid)) as ClusterNode;
      const client = new Redis(live.port, '127.0.0.1');
      try {
        const slots = (await client.cluster('SLOTS')) as unknown as Array<[number, number, [string, number, string]]>;
        const byPort = new Map<number, Array<[number, number]>>();
        for (const [from, to, [, port]] of slots) byPort.set(port, [...(byPort.get(port) ?? []), [from, to]]);
        return [...byPort].map(([port, ranges]) => ({ port, slots: ranges }));
      } finally {
        client.disconnect();
      }
    },
    stop,
  };
}

function nodeArgs(port: number, dir: string): string[] {
  return [
    ...['--port', String(port), '--bind', '127.0.0.1', '--protected-mode', 'no', '--dir', dir],
    ...['--cluster-enabled', 'yes', '--cluster-config-file', join(dir, `nodes-${port}.conf`), '--cluster-node-timeout', '2000'],
    ...['--repl-diskless-sync', 'yes', '--repl-diskless-sync-delay', '0', '--appendonly', 'no', '--save', ''],
  ];
}

async function waitForClusterOk(ports: number[]): Promise<void> {
  const deadline = Date.now() + 30_000;
  for (;;) {
    const states = await Promise.all(
      ports.map(async (port) => {
        const client = new Redis(port, '127.0.0.1', { lazyConnect: true, maxRetriesPerRequest: 0 });
        try {
          await client.connect();
          return /cluster_state:ok/.test(await client.cluster('INFO'));
        } catch {
          return false;
        } finally {
          client.disconnect();
        }
      }),
    );
    if (states.every(Boolean)) return;
    if (Date.now() > deadline) throw new Error(`Redis Cluster on ports ${ports.join(', ')} did not reach cluster_state:ok within 30 s`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

/** Until CLUSTER SLOTS lists a replica for every master: gossip takes a moment after `--cluster create`. */
async function waitForReplicas(port: number, masters: number): Promise<void> {
  const client = new Redis(port, '127.0.0.1');
  const deadline = Date.now() + 30_000;
  try {
    for (;;) {
      const slots = (await client.cluster('SLOTS')) as unknown as unknown[][];
      const withReplica = slots.filter((range) => range.length >= 4).length;
      if (slots.length >= masters && withReplica === slots.length) return;
      if (Date.now() > deadline) throw new Error('Redis Cluster replicas did not show up in CLUSTER SLOTS within 30 s');
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  } finally {
    client.disconnect();
  }
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}
