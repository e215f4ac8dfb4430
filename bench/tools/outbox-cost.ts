// Where a relayed outbox row's cost goes: the outbox-relay scenario's variants
// (the relay, the raw relay, `publishMany` without ids, `publishMany` with ids and dedup)
// alternating round by round (A B C, C B A, ...) on a redis-server of its own,
// each measured by the CPU it costs per event in every process involved rather
// than by its rate alone, which on a shared host follows the other load:
//
// - Redis: main-thread CPU (`INFO cpu`) and `INFO commandstats` calls and usec
//   per event (the commands a script runs are counted under their own names);
// - this process (the relay or the publisher): `process.cpuUsage()`, every thread;
// - PostgreSQL: the CPU of the bench's cluster (its postmaster and backends, from
//   /proc: Linux only), and the statements sent per relay batch.
//
// Each run is measured from its first append on (the relay's first
// `publishStored`: its rows are committed before; a reference's first
// `publishMany`), or from the raw relay's first read, not over its app's start.
//
//   node -r @swc-node/register bench/tools/outbox-cost.ts [rounds] [variant,variant]
//
// With OUTBOX_PROFILE=<file>, the last round's window of the first variant is
// CPU-profiled into <file> (bench/tools/profile-summary.ts reads it).
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { Session } from 'node:inspector/promises';
import Redis from 'ioredis';
import { Client } from 'pg';
import { EventrailPublisher } from '../../lib';
import { startRedisServer } from '../../test/support/redis-server';
import { outboxRelay } from '../scenarios/outbox';

type Row = Record<string, number>;

const rounds = Number(process.argv[2] ?? 5);
const only = process.argv[3]?.split(',');

// One `publishStored` per relay batch (`publishMany` per call of the others): the first one starts the window.
const window = { batches: 0, publishMs: 0, statements: 0, node: 0, system: 0, pg: 0, started: false, profile: false };
const profileFile = process.env.OUTBOX_PROFILE;
const profiler = profileFile ? new Session() : undefined;
let postmaster: string | undefined;

const query = Client.prototype.query as (...args: unknown[]) => unknown;
(Client.prototype as unknown as { query: unknown }).query = function (this: Client, ...args: unknown[]): unknown {
  // The raw relay's first read (its only statements with rows as arrays) starts its window.
  if (!window.started && (args[0] as { rowMode?: string } | undefined)?.rowMode === 'array') startWindow();
  if (window.started) window.statements++;
  return query.apply(this, args);
};
function startWindow(): void {
  window.started = true;
  window.node = nodeCpuUs();
  window.system = nodeSystemUs();
  window.pg = postgresCpuUs();
  if (window.profile) void profiler?.post('Profiler.start');
}
// The relay appends with `publishStored`, the references with `publishMany`.
for (const name of ['publishMany', 'publishStored'] as const) {
  const append = EventrailPublisher.prototype[name] as (this: EventrailPublisher, ...args: unknown[]) => Promise<unknown>;
  (EventrailPublisher.prototype as unknown as Record<string, unknown>)[name] = function (this: EventrailPublisher, ...args: unknown[]) {
    if (!window.started) startWindow();
    window.batches++;
    const started = performance.now();
    const appended = append.apply(this, args);
    void appended.then(
      () => (window.publishMs += performance.now() - started),
      () => undefined,
    );
    return appended;
  };
}

function nodeCpuUs(): number {
  const { user, system } = process.cpuUsage();
  return user + system;
}
function nodeSystemUs(): number {
  return process.cpuUsage().system;
}

/** `/proc/<pid>/stat` after the command name: state, ppid, ... (utime is [11], stime [12], cutime [13], cstime [14]). */
function stat(pid: string): { name: string; fields: string[] } | undefined {
  try {
    const text = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return { name: text.slice(text.indexOf('(') + 1, text.lastIndexOf(')')), fields: text.slice(text.lastIndexOf(')') + 2).split(' ') };
  } catch {
    return undefined; // gone meanwhile
  }
}

function postmasters(): Set<string> {
  const found = new Set<string>();
  for (const pid of readdirSync('/proc').filter((name) => /^\d+$/.test(name))) {
    const s = stat(pid);
    if (s?.name === 'postgres' && s.fields[1] === '1') found.add(pid);
  }
  return found;
}

/** CPU of the bench's PostgreSQL: its postmaster with the backends it reaped, and the live ones (10 ms ticks). */
function postgresCpuUs(): number {
  if (postmaster === undefined) return 0;
  let ticks = 0;
  for (const pid of readdirSync('/proc').filter((name) => /^\d+$/.test(name))) {
    const s = stat(pid);
    if (!s) continue;
    const [utime, stime, cutime, cstime] = s.fields.slice(11, 15).map(Number);
    if (pid === postmaster) ticks += utime + stime + cutime + cstime;
    else if (s.fields[1] === postmaster) ticks += utime + stime;
  }
  return ticks * 10_000;
}

async function redisCpuUs(admin: Redis): Promise<number> {
  const text = await admin.info('cpu');
  const value = (name: string): number => Number(new RegExp(`${name}:([\\d.]+)`).exec(text)?.[1] ?? NaN);
  return (value('used_cpu_user_main_thread') + value('used_cpu_sys_main_thread')) * 1e6;
}

/** Bytes Redis read and wrote (`INFO stats`), every client's. */
async function netBytes(admin: Redis): Promise<{ input: number; output: number }> {
  const text = await admin.info('stats');
  const value = (name: string): number => Number(new RegExp(`${name}:(\\d+)`).exec(text)?.[1] ?? NaN);
  return { input: value('total_net_input_bytes'), output: value('total_net_output_bytes') };
}

async function commandStats(admin: Redis, events: number): Promise<Row> {
  const row: Row = {};
  for (const line of (await admin.info('commandstats')).split('\n')) {
    const match = /^cmdstat_([^:]+):calls=(\d+),usec=(\d+)/.exec(line.trim());
    // The bench's own commands, and the app's start, are left out.
    if (!match || Number(match[2]) < events / 1000 || /^(info|config|flushall|hello|quit|multi|exec)\b/.test(match[1])) continue;
    row[`${match[1]} calls`] = Number(match[2]) / events;
    row[`${match[1]} usec`] = Number(match[3]) / events;
  }
  return row;
}

const median = (values: number[]): number => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)];

async function main(): Promise<void> {
  const server = await startRedisServer(undefined, ['--save', '', '--appendonly', 'no']);
  const admin = new Redis(server.url);
  const before = postmasters();
  const pick = <T extends { id: string }>(variants: T[]): T[] => variants.filter((v) => !only || only.includes(v.id));
  if (profiler) {
    profiler.connect();
    await profiler.post('Profiler.enable');
  }
  try {
    // Warm-up at quick size; it also starts the scenario's PostgreSQL, found here as the one new postmaster.
    for (const variant of pick(outboxRelay('quick').variants)) await variant.run({ url: server.url, admin, prefix: `warm-${variant.id}` });
    postmaster = [...postmasters()].find((pid) => !before.has(pid));
    const variants = pick(outboxRelay('full').variants);
    const results = new Map<string, Row[]>();
    for (let round = 0; round < rounds; round++) {
      for (const variant of round % 2 === 0 ? variants : [...variants].reverse()) {
        await admin.flushall();
        await admin.config('RESETSTAT');
        const profiled = profiler !== undefined && round === rounds - 1 && variant === variants[0];
        Object.assign(window, { batches: 0, publishMs: 0, statements: 0, started: false, profile: profiled });
        const redisBefore = await redisCpuUs(admin);
        const netBefore = await netBytes(admin);
        const measured = await variant.run({ url: server.url, admin, prefix: `cost-${variant.id}-${round}` });
        if (profiled) writeFileSync(profileFile as string, JSON.stringify((await (profiler as Session).post('Profiler.stop')).profile));
        const events = measured.expected;
        const row: Row = {
          rate: measured.metrics.rate,
          'redis us/event': ((await redisCpuUs(admin)) - redisBefore) / events,
          'node us/event': (nodeCpuUs() - window.node) / events,
          'node system us/event': (nodeSystemUs() - window.system) / events,
          'postgres us/event': (postgresCpuUs() - window.pg) / events,
          ...(await netBytes(admin).then((net) => ({
            'redis bytes in/event': (net.input - netBefore.input) / events,
            'redis bytes out/event': (net.output - netBefore.output) / events,
          }))),
          'append ms/call': window.publishMs / Math.max(window.batches, 1),
          ...(variant.id === 'relay' ? { 'statements/batch': window.statements / Math.max(window.batches, 1) } : {}),
          ...(await commandStats(admin, events)),
        };
        if (measured.done < events) throw new Error(`${variant.id}: ${measured.done} of ${events} events`);
        results.set(variant.id, [...(results.get(variant.id) ?? []), row]);
        console.log(`round ${round + 1} ${variant.id}: ${Math.round(row.rate)} events/s`);
      }
    }
    console.log(`\nMedians over ${rounds} rounds (per event unless said):`);
    for (const [id, rows] of results) {
      const names = [...new Set(rows.flatMap((row) => Object.keys(row)))];
      console.log(`\n${id}`);
      for (const name of names) console.log(`  ${name.padEnd(22)} ${median(rows.map((row) => row[name] ?? 0)).toFixed(3)}`);
    }
    const relay = results.get('relay');
    for (const reference of ['publishMany', 'publishMany-ids', 'raw-relay']) {
      const base = results.get(reference);
      if (!relay || !base) continue;
      const ratios = relay.map((row, i) => row.rate / base[i].rate);
      console.log(`\nrelay / ${reference}: ${ratios.map((r) => r.toFixed(3)).join(' ')}, median ${median(ratios).toFixed(3)}`);
    }
  } finally {
    admin.disconnect();
    await server.stop('SIGTERM');
  }
  process.exit(0); // the scenario's PostgreSQL is stopped by its own exit hook
}

void main();
