import { readFileSync } from 'node:fs';
import type { Socket } from 'node:net';
import Redis from 'ioredis';
import { EventrailAdmin, EventrailPublisher } from '../../lib';
import { EventrailKeys } from '../../lib/redis/keys';
import { leanScript } from '../../lib/redis/scripts';
import { compareStreamIds } from '../../lib/wire/stream-id';
import { killQuietly } from '../support/child-processes';
import { createApp } from '../support/app';
import { uniquePrefix, waitFor } from '../support/helpers';
import { chaosKeys, decodeAttempt, EVENTS, FUZZ_MARK_TTL_MS, FuzzAttempt, FuzzData, GROUPS } from './support/chaos-protocol';
import { DurableRedis } from './support/durable-redis';
import { offsetsAndEnds } from './support/log-checks';
import { PathProxy } from './support/path-proxy';
import { useSupervisedRun } from './support/supervised-run';
import { Supervisor } from './support/supervisor';

/** As seed 1003 of the fault schedules draws it, on one partition (so the second worker must take exactly A's). */
const CONSUMER = {
  concurrency: 2,
  batchSize: 5,
  lockTtlMs: 1000,
  heartbeatTtlMs: 1000,
  maxRetries: 3,
  retryBackoffMs: 10,
  retryBackoffMaxMs: 80,
  maxDeliveries: 50,
  ordering: 'partition' as const,
};
const PARTITIONS = 1;
const GROUP = GROUPS.fuzzIdem;
/** Pace of the background producer; no assertion depends on it. */
const PACE_MS = 15;
/** Events published at once before the cut: more than a fetch (`batchSize`), handled one after another (keyless). */
const BURST = 40;
/** Which handler record of A's after the burst the cut starts at: a few entries into its first fetch. */
const CUT_AT_RECORD = 3;
const READY_MS = 90_000;
const STEP_MS = 30_000;

/** One command carrying a worker's lease token, as MONITOR saw Redis run it. */
interface TokenCommand {
  at: number;
  name: string;
  args: string[];
}

/**
 * A worker's path cut, the worker frozen past its lease while cut, the cut
 * healed while it is frozen, another worker taking over, then the first one
 * resumed: the situation of fault-schedule seed 1003's idempotency report,
 * made deterministic. The suspicion it tests: that after SIGCONT the replies
 * the cut held get matched to the wrong commands, so that the worker takes a
 * stale "renewed" or "committed" for a fresh one and goes on under a lease
 * that is someone else's.
 *
 * Worker A (fuzz mode: group `fuzz-idem` with `enableIdempotency`, each
 * handler attempt recorded with the event's done-mark as Redis had it) talks
 * to Redis through a PathProxy; worker B goes direct and waits for A's lease.
 * A burst of keyless events gives A a fetch in hand; its path goes silent
 * (nothing forwarded, nothing closed) as it sends the record of a handler
 * call, so a handler is in flight and the fetch's later entries have not
 * started; once A has also sent a command with its lease token (a renewal,
 * or a commit) into the cut, A is SIGSTOPped. The cut heals while A is frozen:
 * at once (what A sent lands while its lease still holds, the replies wait in
 * its socket), or once B has taken over (what A sent is fenced). B takes the
 * lease and handles and commits events published after its take-over; then
 * A gets SIGCONT.
 *
 * Then: no handler call started after its event's done-mark was committed;
 * A starts no handler after it resumed, and none after B started the same
 * event; A says it lost the partition; renewals or commits with A's token ran
 * after B took over and the lease stayed B's; the group reaches the end of
 * the log. (A worker that trusts its lease after the freeze, made so by
 * patching `PartitionLease.mayHaveExpired` to false in A, fails the first
 * case with the fuzz suite's idempotency violation.)
 */
describe('chaos: a cut path healed while its worker is frozen', () => {
  let server: DurableRedis | undefined;
  let redis: Redis | undefined;
  const current = useSupervisedRun();
  let second: Supervisor | undefined;

  beforeAll(async () => {
    server = await DurableRedis.start();
    redis = new Redis(server.url);
    redis.on('error', () => undefined);
  });

  afterEach(async () => {
    await second?.stop();
    second = undefined;
  });

  afterAll(async () => {
    redis?.disconnect();
    await server?.destroy();
  });

  it('healed at once: A, resumed after B took over, learns it lost the lease and starts no handler', async () => {
    await scenario('at-once');
  }, 180_000);

  it('healed after B took over: A, resumed, learns it lost the lease and starts no handler', async () => {
    await scenario('after-takeover');
  }, 180_000);

  it('healed at once, then the offsets reset by force while A is frozen: A, resumed, starts no handler', async () => {
    await scenario('at-once', { reset: true });
  }, 180_000);

  /** `reset`: an operator's forced reset to the start while A is frozen (it revokes A's lease and drops the done-marks), as seed 1003 did. */
  async function scenario(heal: 'at-once' | 'after-takeover', { reset = false } = {}): Promise<void> {
    const durable = server as DurableRedis;
    const client = redis as Redis;
    const prefix = uniquePrefix('chaos-cut-freeze');
    const keys = new EventrailKeys(prefix, PARTITIONS);
    const leaseKey = keys.lease(GROUP, 0);
    const proxy = await PathProxy.start(durable.url);
    const monitor = await client.monitor();
    const trace: TokenCommand[] = [];
    let producing = true;
    let producer: Promise<void> = Promise.resolve();
    try {
      const app = await createApp({ redis: durable.url, prefix, partitions: PARTITIONS });
      current.app = app;
      const publisher = app.get(EventrailPublisher);
      const admin = app.get(EventrailAdmin);
      const config = { mode: 'fuzz' as const, prefix, partitions: PARTITIONS, consumer: CONSUMER, fuzzGroups: 1 };

      // A alone first, so the lease is its own; then B, which waits for it.
      const supA = new Supervisor({ ...config, redisUrl: proxy.url }, 1);
      current.supervisor = supA;
      supA.start();
      const a = await waitFor(
        () => supA.readyChildren()[0],
        () => `worker A ready:\n${supA.describe()}`,
        READY_MS,
      );
      let n = 0;
      const publishOne = async (): Promise<string> => {
        n++;
        const data: FuzzData = { n, seq: n };
        return (await publisher.publish(EVENTS.fuzzBoth, data, { partition: 0 })).offset;
      };
      let lastOffset = '';
      for (let i = 0; i < 10; i++) lastOffset = await publishOne();
      await waitFor(async () => (await committed(client, keys)) === lastOffset, 'A to commit the first events', STEP_MS);
      expect(await client.get(leaseKey)).toMatch(new RegExp(`^${escape(a.workerId)}:\\d+$`));
      const tokenA = (await client.get(leaseKey)) as string;

      second = new Supervisor({ ...config, redisUrl: durable.url }, 1);
      second.start();
      const supB = second;
      const b = await waitFor(
        () => supB.readyChildren()[0],
        () => `worker B ready:\n${supB.describe()}`,
        READY_MS,
      );
      expect(await client.get(leaseKey)).toBe(tokenA);

      const monitorStart = Date.now();
      monitor.on('monitor', (time: string, args: string[]) => {
        if (args.some((arg) => arg.includes(a.workerId))) trace.push({ at: Math.round(Number(time) * 1000), name: nameOf(args), args });
      });

      // Events flow, and A handles them.
      const produce = (): void => {
        producing = true;
        producer = (async () => {
          while (producing) {
            lastOffset = await publishOne().catch(() => lastOffset);
            await pause(PACE_MS);
          }
        })();
      };
      produce();
      const before = await attempts(client, prefix);
      await waitFor(
        async () => (await attempts(client, prefix)).filter((x) => x.pid === a.pid).length > before.length + 5,
        'A handling',
        STEP_MS,
      );

      // A burst, so A has a fetch in hand whose later entries have not started when it freezes: after it
      // resumes, only its lease check (the local clock) keeps them from starting. The path goes silent
      // as A sends the record of its CUT_AT_RECORD-th handler call since then (that record is held too).
      producing = false;
      await producer;
      let cutAt = 0;
      let records = 0;
      const recordsKey = chaosKeys.fuzzAttempts(prefix);
      for (const { client: fromA } of pairsOf(proxy))
        fromA.prependListener('data', (chunk: Buffer) => {
          if (cutAt > 0 || !chunk.includes(recordsKey) || ++records < CUT_AT_RECORD) return;
          proxy.silence();
          cutAt = Date.now();
        });
      const burst = Array.from({ length: BURST }, () => ++n);
      const burstOffsets = await publisher.publishMany(
        burst.map((k) => ({ event: EVENTS.fuzzBoth, data: { n: k, seq: k }, partition: 0 })),
      );
      lastOffset = burstOffsets[burstOffsets.length - 1].offset;
      await waitFor(() => cutAt > 0, "the cut, at A's handler record", STEP_MS, 5);
      produce();

      // Until A has also sent a command with its lease token into the cut (a renewal falls due every lockTtlMs / 3),
      // or had one on its way when the path went silent: Redis ran it at the cut or after, so its reply is held
      // toward A, and A's ticks (one at a time) wait on it. CI met that once: 30 s without a renewal into the cut.
      const inFlightAtCut = (): boolean => trace.some((c) => c.at >= cutAt && c.args.some((arg) => arg.includes(tokenA)));
      await waitFor(
        () => heldTowardRedis(proxy).includes(tokenA) || inFlightAtCut(),
        'A to send a command with its lease token into the cut',
        STEP_MS,
        10,
      );
      const heldRequests = describeHeld(heldTowardRedis(proxy), tokenA);

      // Frozen while cut.
      expect(killQuietly(a.pid, 'SIGSTOP')).toBe(true);
      await waitFor(() => processState(a.pid) === 'T', 'A stopped', 5_000, 5);
      const frozenAt = Date.now();
      let heldReplies = describeReplies(heldTowardWorker(proxy));
      let healedAt = 0;
      const healNow = (): void => {
        heldReplies = describeReplies(heldTowardWorker(proxy));
        proxy.heal();
        healedAt = Date.now();
      };
      if (heal === 'at-once') healNow();
      if (reset) await admin.resetOffsets(GROUP, 'start', { force: true });

      // B takes the lease, then handles and commits events published after that.
      const tokenB = await waitFor(
        async () => {
          const value = await client.get(leaseKey);
          return value?.startsWith(`${b.workerId}:`) ? value : undefined;
        },
        'B to take the lease',
        STEP_MS,
        10,
      );
      const takenAt = Date.now();
      const afterTakeover = lastOffset;
      await waitFor(
        async () => {
          const at = await committed(client, keys);
          return at !== null && compareStreamIds(at, afterTakeover) > 0;
        },
        `B to commit past ${afterTakeover}`,
        STEP_MS,
      );
      const bHandled = (await attempts(client, prefix)).filter((x) => x.pid === b.pid && x.outcome === 'H').length;
      expect(bHandled).toBeGreaterThan(0);
      if (heal === 'after-takeover') healNow();
      expect(processState(a.pid)).toBe('T');

      // A resumes, with the replies the cut held in its socket.
      expect(a.lines.filter((line) => LOST.test(line))).toEqual([]);
      const resumedAt = Date.now();
      expect(killQuietly(a.pid, 'SIGCONT')).toBe(true);
      const losses = await waitFor(
        () => {
          const said = a.lines.filter((line) => LOST.test(line));
          return said.length > 0 ? said : undefined;
        },
        () => `A to say it lost the partition; its last lines:\n${a.lines.join('\n')}`,
        STEP_MS,
      );
      // B goes on: events published after A resumed are committed.
      const afterResume = lastOffset;
      await waitFor(
        async () => {
          const at = await committed(client, keys);
          return at !== null && compareStreamIds(at, afterResume) > 0;
        },
        `the group to commit past ${afterResume} after A resumed`,
        STEP_MS,
      );
      producing = false;
      await producer;
      await waitFor(async () => (await committed(client, keys)) === lastOffset, 'the group to reach the end of the log', STEP_MS);

      const all = await attempts(client, prefix);
      const leaseNow = await client.get(leaseKey);
      console.log(
        [
          `heal ${heal}${reset ? ', reset' : ''}: A pid ${a.pid} (${tokenA}), B pid ${b.pid} (${tokenB}); ${n} events; ` +
            `cut at +${cutAt - monitorStart} ms, frozen at +${frozenAt - monitorStart}, healed at +${healedAt - monitorStart}, ` +
            `B took the lease at +${takenAt - monitorStart}, A resumed at +${resumedAt - monitorStart}`,
          `held toward Redis at the freeze: ${heldRequests}`,
          `held toward A at the heal: ${heldReplies}`,
          `commands with A's token that Redis ran: ${trace.map((c) => `${c.name}@+${c.at - monitorStart}`).join(', ')}`,
          `A after resuming: ${losses.join(' | ')}`,
          `attempts: ${all.length}, by A ${all.filter((x) => x.pid === a.pid).length}, by B ${all.filter((x) => x.pid === b.pid).length}; lease now ${leaseNow}`,
        ].join('\n'),
      );

      expect(idempotencyViolations(all)).toEqual([]);
      // A's lease was B's by then: no handler of A may start after it resumed.
      expect(all.filter((x) => x.pid === a.pid && x.startedAt >= resumedAt).map(describeAttempt)).toEqual([]);
      // No handling by A started after B had started handling the same event.
      expect(startedAfterOther(all, a.pid)).toEqual([]);
      // Redis ran renewals or commits with A's token after B held the lease (held by the cut, or sent after
      // A resumed): they are what A learnt its loss from, and the lease stayed B's, so they were refused;
      const refused = trace.filter((c) => c.at >= takenAt && (c.name === 'renewLease' || c.name === 'commitOffset'));
      expect(refused.length).toBeGreaterThan(0);
      // nothing A sent took the lease back.
      expect(leaseNow === null || !leaseNow.startsWith(`${a.workerId}:`)).toBe(true);
      const [{ committed: end, last }] = await offsetsAndEnds(client, keys, GROUP);
      expect(end).toBe(last);
    } finally {
      producing = false;
      await producer.catch(() => undefined);
      monitor.disconnect();
      await proxy.close();
    }
  }
});

/** What a worker logs when it learns its lease is gone (group-consumer.ts, partition-worker.ts). */
const LOST = /lease lost|lease was taken over|commit of .* failed/;

async function committed(client: Redis, keys: EventrailKeys): Promise<string | null> {
  return client.get(keys.offset(GROUP, 0));
}

async function attempts(client: Redis, prefix: string): Promise<FuzzAttempt[]> {
  return (await client.lrange(chaosKeys.fuzzAttempts(prefix), 0, -1)).map(decodeAttempt).filter((x) => x.group === GROUP);
}

/** The fuzz checker's idempotency invariant: no handler call started after its event's done-mark was committed. */
function idempotencyViolations(all: readonly FuzzAttempt[]): string[] {
  return all
    .filter((x) => x.mark !== null && x.mark - FUZZ_MARK_TTL_MS < x.startedAt)
    .map(
      (x) => `${describeAttempt(x)} started ${x.startedAt - ((x.mark as number) - FUZZ_MARK_TTL_MS)} ms after its done-mark was committed`,
    );
}

/** Attempts by `pid` that started after another process had started an attempt of the same event. */
function startedAfterOther(all: readonly FuzzAttempt[], pid: number): string[] {
  const firstByOthers = new Map<string, number>();
  for (const x of all) if (x.pid !== pid) firstByOthers.set(x.eventId, Math.min(firstByOthers.get(x.eventId) ?? Infinity, x.startedAt));
  return all.filter((x) => x.pid === pid && x.startedAt > (firstByOthers.get(x.eventId) ?? Infinity)).map(describeAttempt);
}

function describeAttempt(x: FuzzAttempt): string {
  return `${x.eventId} at ${x.offset} by pid ${x.pid} (attempt ${x.attempt}, ${x.outcome}, started ${x.startedAt}, mark ${x.mark})`;
}

/** Script names by SHA and by source, so the trace says what each EVALSHA or EVAL was. */
const SCRIPTS = [
  'RenewLease',
  'CommitOffset',
  'AcquireLease',
  'ReleaseLease',
  'BarMembers',
  'Heartbeat',
  'MarkDelivery',
  'ReadIndex',
  'ReadLag',
].map((name) => {
  const { sha, lua } = leanScript(`eventrail${name}`);
  return { name: name[0].toLowerCase() + name.slice(1), sha, lua };
});

function nameOf(args: readonly string[]): string {
  const [command = '', body = ''] = args;
  const script = SCRIPTS.find((s) => s.sha === body || s.lua === body);
  if (script) return script.name;
  return /^eval/i.test(command) ? `${command} ${body.slice(0, 8)}` : command;
}

/**
 * What the cut holds, by direction. PathProxy keeps it to itself (it is a fault, not an API): read here
 * only to wait until the cut holds what the scenario needs, and to say what it held. A paused socket
 * keeps what it received in its own buffer; `read()` hands that over as a `data` event, which the cut
 * proxy holds, in order, ahead of anything read later (so nothing changes in what it forwards when healed).
 */
interface ProxyInternals {
  pairs: Set<{ client: Socket; upstream: Socket; held: Array<{ to: Socket; chunk: Buffer }> }>;
}

function heldTowardRedis(proxy: PathProxy): string {
  return held(proxy, 'upstream');
}

function heldTowardWorker(proxy: PathProxy): string {
  return held(proxy, 'client');
}

function pairsOf(proxy: PathProxy): ProxyInternals['pairs'] {
  return (proxy as unknown as ProxyInternals).pairs;
}

function held(proxy: PathProxy, side: 'client' | 'upstream'): string {
  let text = '';
  for (const pair of pairsOf(proxy)) {
    const from = side === 'upstream' ? pair.client : pair.upstream;
    while (proxy.isCut && from.readableLength > 0 && from.read() !== null);
    for (const { to, chunk } of pair.held) if (to === pair[side]) text += chunk.toString('latin1');
  }
  return text;
}

/** The held requests: each command's name (a script's by its SHA), marked with `*` when it carries `token`. */
function describeHeld(text: string, token: string): string {
  const commands = text.split(/(?=\*\d+\r\n\$)/).filter((c) => c.length > 0);
  return (
    commands
      .map((c) => {
        const parts = c.split('\r\n').filter((_, i) => i > 0 && i % 2 === 0);
        const name = c.includes(':chaos:fuzz-attempts') ? 'handler record' : nameOf(parts);
        return `${name}${c.includes(token) ? '*' : ''}`;
      })
      .join(', ') || 'nothing'
  );
}

/** The held replies, abridged. */
function describeReplies(text: string): string {
  return JSON.stringify(text.length > 300 ? `${text.slice(0, 300)}...(${text.length} bytes)` : text);
}

/** The state letter of /proc/<pid>/stat: `T` once SIGSTOP took effect. */
function processState(pid: number): string {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3);
  } catch {
    return '?';
  }
}

function escape(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

function pause(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
