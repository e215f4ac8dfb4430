import type { DeadLetter } from '../../lib';
import { EVENTS, FUZZ_MARK_TTL_MS, FuzzAttempt, FuzzData, GROUPS } from './support/chaos-protocol';
import type { Schedule } from './schedule';
import { wantedUntilPassed, type WantSample } from './want-sampler';

/** One entry of the log as the stream holds it. */
export interface FuzzLogEntry {
  partition: number;
  offset: string;
  id: string;
  event: string;
  key: string | null;
  /** Set on dead-letter replays: the one group that handles it. */
  to: string | undefined;
  data: FuzzData;
}

/** An event whose publish resolved: where publish said it is. */
export interface Accepted {
  n: number;
  id: string;
  partition: number;
  offset: string;
}

/** A span of the run (Date.now()); `to` 0 while it lasts. */
export interface Window {
  from: number;
  to: number;
}

/** One `publish` or `publishMany` call of the schedule. */
export interface PublishCall {
  /** The events it carried (their `n`). */
  events: number[];
  many: boolean;
  /** When it was called and when it settled (Date.now()). */
  from: number;
  to: number;
  /** Its error by class name, a PublishManyError's with its cause's (`PublishManyError(RedisFullError)`); unset when it resolved. */
  error?: string;
  /** Events the error says were not appended: all of a `RedisFullError`, a PublishManyError's `not-appended` ones. */
  refused: number[];
}

/** Everything a run leaves to check, collected after the groups caught up. */
export interface RunRecord {
  schedule: Schedule;
  accepted: readonly Accepted[];
  log: readonly FuzzLogEntry[][];
  /** Every handler attempt, in the order Redis applied them. */
  attempts: readonly FuzzAttempt[];
  /** Per group: dead letters still there at the end, and those replayed during the run. */
  deadLetters: ReadonlyMap<string, { current: readonly DeadLetter[]; replayed: readonly DeadLetter[] }>;
  /** Committed offsets that moved back with no reset to explain it (from the sampler). */
  backwardMoves: readonly string[];
  /** Worker exits that were not the test's doing. */
  unexpectedExits: readonly string[];
  /** Workers SIGSTOPped during the run: pid, from and to (Date.now()). */
  freezes: ReadonlyArray<{ pid: number; from: number; to: number }>;
  /** Set when the groups did not catch up in time. */
  drainFailure?: string;
  /**
   * Rolling deploys: when older workers (whose `fuzz-idem` lacks `fuzz.first`) ran (Date.now(), with
   * the membership's linger added), and readings of whether a live member of `fuzz-idem` wanted `fuzz.first`.
   */
  rolling?: { lives: ReadonlyArray<{ from: number; to: number }>; samples: readonly WantSample[] };
  /** Every publish call. */
  publishes?: readonly PublishCall[];
  /** When Redis refused writes (maxmemory below its used memory). */
  fills?: readonly Window[];
  /** When Redis did not answer at all (killed until restarted, SIGSTOPped until SIGCONT). */
  outages?: readonly Window[];
  /** Worker paths cut: slot, pid, from and to. */
  cuts?: ReadonlyArray<{ slot: number; pid: number; from: number; to: number }>;
}

export interface Violation {
  invariant: 'delivered' | 'key-order' | 'dead-letters' | 'offsets' | 'idempotency' | 'replay-target' | 'workers' | 'drained' | 'refusals';
  detail: string;
  /**
   * idempotency: another process had handled the event before (so the mark
   * was committed under someone else's lease): the call came from a stale
   * owner going on with the batch it had in hand (it was SIGSTOPped, or stalled, past its lease).
   */
  staleOwner?: boolean;
}

const LIMIT_PER_INVARIANT = 10;

/** Whether `group` has a handler for `entry` (its type, and a replay marked for it or for nobody). */
export function wants(group: string, entry: Pick<FuzzLogEntry, 'event' | 'to'>): boolean {
  if (entry.to !== undefined && entry.to !== group) return false;
  if (entry.event === EVENTS.fuzzBoth) return true;
  return entry.event === EVENTS.fuzzFirst && group === GROUPS.fuzzIdem;
}

export function ref(partition: number, offset: string): string {
  return `${partition}|${offset}`;
}

/**
 * The invariants of a run:
 * - delivered: every accepted publish is in the log where publish said, and
 *   every log entry (accepted or appended by a publish that rejected) is
 *   handled, or dead-lettered, by every group that has a handler for it
 *   (during a rolling deploy: that a live member wanted from its publish until it was passed);
 * - key-order: per group and key (keyless: per partition), an entry is first
 *   handled only after every earlier entry of its key was first handled or
 *   finally failed (its last attempt before the dead letter);
 * - dead-letters: only events made to fail in that group, with the reason their poison asks for;
 * - offsets: no committed offset moved back except across a reset;
 * - idempotency: in fuzz-idem, no handler call started after the event's done-mark was committed;
 * - replay-target: a replayed entry is handled by its group alone;
 * - refusals: a publish called and settled while Redis was full (and answering) rejected with
 *   `RedisFullError` (`publishMany`: a PublishManyError caused by one), or with `RedisUnavailableError`
 *   when it started within ioredis's reconnect backoff after an outage (its connection was not back), and
 *   no event a publish said was not appended is in the log;
 * - workers: no worker died but by the test's hand; drained: the groups caught up.
 */
export function checkRun(run: RunRecord): Violation[] {
  const out: Violation[] = [];
  const add = (invariant: Violation['invariant'], detail: string, staleOwner?: boolean): void => {
    if (out.filter((v) => v.invariant === invariant).length < LIMIT_PER_INVARIANT)
      out.push({ invariant, detail, ...(staleOwner ? { staleOwner } : {}) });
  };
  if (run.drainFailure) add('drained', run.drainFailure);
  for (const exit of run.unexpectedExits) add('workers', exit);
  for (const move of run.backwardMoves) add('offsets', move);
  checkDelivered(run, add);
  for (const group of run.schedule.groups) checkKeyOrder(run, group, add);
  checkDeadLetters(run, add);
  checkIdempotency(run, add);
  checkRefusals(run, add);
  for (const a of run.attempts) {
    const entry = entryAt(run, a.partition, a.offset);
    if (entry && !wants(a.group, entry)) add('replay-target', `${a.group} ran a handler for ${describeEntry(entry)}, which is not for it`);
  }
  return out;
}

type Add = (invariant: Violation['invariant'], detail: string, staleOwner?: boolean) => void;

function checkDelivered(run: RunRecord, add: Add): void {
  for (const a of run.accepted) {
    const entry = entryAt(run, a.partition, a.offset);
    if (!entry || entry.id !== a.id)
      add('delivered', `event ${a.n} (${a.id}) accepted at ${ref(a.partition, a.offset)} is not in the log there`);
  }
  for (const group of run.schedule.groups) {
    const handlings = run.attempts.filter((a) => a.group === group && a.outcome === 'H');
    const handled = new Set(handlings.map((a) => ref(a.partition, a.offset)));
    // With idempotency on, an entry whose event id was handled at another entry (a replay) is skipped without a call.
    const handledIds = new Set(group === GROUPS.fuzzIdem ? handlings.map((a) => a.eventId) : []);
    const letters = run.deadLetters.get(group);
    const lettered = new Set([...(letters?.current ?? []), ...(letters?.replayed ?? [])].map((d) => ref(d.partition, d.offset)));
    for (const entry of run.log.flat()) {
      const at = ref(entry.partition, entry.offset);
      if (!wantedByLiveMember(run, group, entry)) continue;
      if (wants(group, entry) && !handled.has(at) && !lettered.has(at) && !handledIds.has(entry.id))
        add('delivered', `${group} neither handled nor dead-lettered ${describeEntry(entry)}`);
    }
  }
}

/**
 * During a rolling deploy, a `fuzz.first` entry must be handled by `fuzz-idem` if a live member of it
 * wanted `fuzz.first` from the entry's publish until the group passed it: its committed offset past the
 * entry and, for a parked entry, its line released (the entry's stream id is on the Redis clock, as the
 * readings are). Once no live member wants it (the only one left frozen or
 * killed past its heartbeat, or gone), the older members go on past it, as designed.
 */
function wantedByLiveMember(run: RunRecord, group: string, entry: FuzzLogEntry): boolean {
  if (!run.rolling || group !== GROUPS.fuzzIdem || entry.event !== EVENTS.fuzzFirst) return true;
  // Before any older worker ran, every member handles fuzz.first: the plain rule holds.
  const publishedAt = Number(entry.offset.split('-')[0]);
  if (run.rolling.lives.every((life) => life.to < publishedAt)) return true;
  return wantedUntilPassed(run.rolling.samples, entry.partition, entry.offset, publishedAt);
}

function checkKeyOrder(run: RunRecord, group: string, add: Add): void {
  const { maxRetries, ordering } = run.schedule.consumer;
  // 'unordered' promises no order within a key: only the parked message waits.
  if (ordering === 'unordered') return;
  // Parked modes: an entry's final failure is an attempt a dead letter names (redeliveries go on until its age runs out).
  const finalAttempts = ordering === 'key' ? deadLetteredAttempts(run, group) : undefined;
  // Per chain (key, or keyless partition): the group's entries in stream order, and each entry's place.
  const chains = new Map<string, FuzzLogEntry[]>();
  const place = new Map<string, { chain: string; index: number; entry: FuzzLogEntry }>();
  for (const partition of run.log) {
    for (const entry of partition) {
      // An entry passed over because no live member wanted it any more is not in its key's order.
      if (!wants(group, entry) || !wantedByLiveMember(run, group, entry)) continue;
      const chain = entry.key ?? `#${entry.partition}`;
      const list = chains.get(chain) ?? [];
      chains.set(chain, list);
      place.set(ref(entry.partition, entry.offset), { chain, index: list.length, entry });
      list.push(entry);
    }
  }
  // Entries of each event id: with idempotency on, handling one settles the others (they are skipped).
  const byId = new Map<string, string[]>();
  for (const [at, { entry }] of place) byId.set(entry.id, [...(byId.get(entry.id) ?? []), at]);
  const settled = new Set<string>();
  // Per chain: how many entries from the first on are settled.
  const prefix = new Map<string, number>();
  const advance = (chain: string): void => {
    const list = chains.get(chain) as FuzzLogEntry[];
    let next = prefix.get(chain) ?? 0;
    while (next < list.length && settled.has(ref(list[next].partition, list[next].offset))) next++;
    prefix.set(chain, next);
  };
  for (const a of run.attempts) {
    if (a.group !== group) continue;
    const at = ref(a.partition, a.offset);
    const found = place.get(at);
    if (!found) {
      // Its own entry is in no chain (passed over while no live member wanted it), but with idempotency its handling
      // still settles the other entries of its id (a replay of it is skipped as done).
      if (a.outcome === 'H' && group === GROUPS.fuzzIdem)
        for (const other of byId.get(a.eventId) ?? []) {
          settled.add(other);
          advance((place.get(other) as { chain: string }).chain);
        }
      continue;
    }
    const poison = found.entry.data.poison?.[group];
    // The attempt after which the library dead-letters the entry (poison wins over a transient failure).
    const finalFailure = finalAttempts
      ? a.outcome !== 'H' && finalAttempts.has(`${at}|${a.attempt}`)
      : a.outcome === 'P' && (poison === 'non-retryable' || a.attempt > maxRetries);
    if (a.outcome !== 'H' && !finalFailure) continue;
    if (!settled.has(at)) {
      const first = prefix.get(found.chain) ?? 0;
      if (a.outcome === 'H' && found.index > first) {
        const missing = (chains.get(found.chain) as FuzzLogEntry[])[first];
        add(
          'key-order',
          `${group}: ${describeEntry(found.entry)} first handled (pid ${a.pid}, attempt ${a.attempt}) before ${describeEntry(missing)} was handled or dead-lettered`,
        );
      }
      settled.add(at);
    }
    // Even a repeat handling (after a reset) settles the other entries of the id: their done-mark makes them skipped.
    if (a.outcome === 'H' && group === GROUPS.fuzzIdem) for (const other of byId.get(a.eventId) ?? []) settled.add(other);
    advance(found.chain);
  }
}

/**
 * The attempts of `group` after which an entry was dead-lettered, as `<partition>|<offset>|<attempt>`: a
 * dead letter records the attempt it gave up after. (An entry handled again after a replay or a Redis
 * crash can be dead-lettered more than once.)
 */
function deadLetteredAttempts(run: RunRecord, group: string): Set<string> {
  const letters = run.deadLetters.get(group);
  return new Set([...(letters?.current ?? []), ...(letters?.replayed ?? [])].map((d) => `${ref(d.partition, d.offset)}|${d.attempts}`));
}

function checkDeadLetters(run: RunRecord, add: Add): void {
  for (const [group, { current, replayed }] of run.deadLetters) {
    const seen = new Set<string>();
    for (const letter of [...current, ...replayed]) {
      if (seen.has(letter.id)) continue;
      seen.add(letter.id);
      const data = letter.data as Partial<FuzzData> | null;
      const poison = data?.poison?.[group];
      const expected = poison === 'always' ? 'retries-exhausted' : poison === 'non-retryable' ? 'non-retryable' : undefined;
      // Parked modes: an event failing for a while is dead-lettered only once it failed for the parked stage's whole budget.
      const { redelivery } = run.schedule.consumer;
      const outlived =
        !poison &&
        redelivery !== undefined &&
        letter.reason === 'retries-exhausted' &&
        letter.failedAt.getTime() - letter.firstFailedAt.getTime() >= redelivery.maxAgeMs - 50;
      if (letter.reason !== expected && !outlived) {
        add(
          'dead-letters',
          `${group} dead-lettered event ${data?.n} (${letter.eventId}) at ${ref(letter.partition, letter.offset)} ` +
            `with reason ${letter.reason} (${letter.error.name}: ${letter.error.message}, ${letter.attempts} attempts); ` +
            `its poison for the group: ${poison ?? 'none'}`,
        );
      }
    }
  }
}

/**
 * A handler start that a SIGSTOP split from the lease check that let it start: the worker checked its
 * lease (valid), was stopped before the handler read the clock, and resumed after another worker had
 * handled and committed the event. No lease can prevent that (a pause between the check and the effect
 * is what `lockTtlMs` bounds, not what fencing can), so the checker does not count it. Recognised by the
 * attempt's `checkedAt`: the process's last valid check, at most `CHECK_TO_STOP_MS` before the freeze's
 * start (the check and the handler call run in one synchronous stretch), and the handler's start after
 * the freeze ended. A freeze can split at most `concurrency` starts (one per handler in flight); a worker
 * that skipped its checks after resuming would start more, and those count.
 */
const CHECK_TO_STOP_MS = 50;
/** Date.now() of two processes, read around a kill(2): ms apart at most. */
const CLOCK_SLACK_MS = 2;

function splitByFreeze(run: RunRecord, a: FuzzAttempt, used: Map<object, number>): boolean {
  for (const f of run.freezes) {
    if (f.pid !== a.pid || f.to === 0) continue;
    const checkedBefore = a.checkedAt > 0 && a.checkedAt <= f.from + CLOCK_SLACK_MS && f.from - a.checkedAt <= CHECK_TO_STOP_MS;
    if (!checkedBefore || a.startedAt < f.to - CLOCK_SLACK_MS) continue;
    const count = used.get(f) ?? 0;
    if (count >= run.schedule.consumer.concurrency) return false;
    used.set(f, count + 1);
    return true;
  }
  return false;
}

function checkIdempotency(run: RunRecord, add: Add): void {
  // Event id -> pids whose handler of it succeeded so far.
  const handledBy = new Map<string, Set<number>>();
  // Freeze -> handler starts it split from their lease checks (splitByFreeze).
  const split = new Map<object, number>();
  for (const a of run.attempts) {
    if (a.group !== GROUPS.fuzzIdem) continue;
    const pids = handledBy.get(a.eventId) ?? new Set<number>();
    handledBy.set(a.eventId, pids);
    const staleOwner = [...pids].some((pid) => pid !== a.pid);
    if (a.outcome === 'H') pids.add(a.pid);
    if (a.mark === null) continue;
    const committedAt = a.mark - FUZZ_MARK_TTL_MS;
    if (committedAt >= a.startedAt) continue;
    if (splitByFreeze(run, a, split)) continue;
    const frozen = run.freezes.filter((f) => f.pid === a.pid && f.from <= a.startedAt);
    add(
      'idempotency',
      `${a.group}: handler for ${a.eventId} at ${ref(a.partition, a.offset)} (pid ${a.pid}, attempt ${a.attempt}) started at ${a.startedAt}, ` +
        `${a.startedAt - committedAt} ms after its done-mark was committed (${committedAt}), its process's last valid lease check at ${a.checkedAt}` +
        (staleOwner ? `; pid${[...pids].filter((p) => p !== a.pid).map((p) => ` ${p}`)} had handled it before` : '') +
        (frozen.length ? `; pid ${a.pid} had been SIGSTOPped ${frozen.map((f) => `${f.from}-${f.to}`).join(', ')}` : ''),
      staleOwner,
    );
  }
}

/** ioredis's longest reconnect delay (its default retryStrategy: 50 ms more per try, at most 2 s) and some slack. */
const RECONNECT_BACKOFF_MS = 2_500;

function checkRefusals(run: RunRecord, add: Add): void {
  const inLog = new Map(run.log.flat().map((e) => [e.data.n, e]));
  const within = (call: PublishCall, w: Window): boolean => call.from >= w.from && w.to !== 0 && call.to <= w.to;
  const overlaps = (call: PublishCall, w: Window): boolean => call.from <= (w.to || Infinity) && call.to >= w.from;
  for (const call of run.publishes ?? []) {
    const what = `${call.many ? 'publishMany' : 'publish'} of event${call.events.length > 1 ? 's' : ''} ${call.events.join(', ')}`;
    for (const n of call.refused) {
      const entry = inLog.get(n);
      if (entry) add('refusals', `${what} said event ${n} was not appended (${call.error}), but it is in the log: ${describeEntry(entry)}`);
    }
    const full = (run.fills ?? []).some((w) => within(call, w));
    if (!full || (run.outages ?? []).some((w) => overlaps(call, w))) continue;
    const expected = call.many ? 'PublishManyError(RedisFullError)' : 'RedisFullError';
    // Redis back up, but the publisher's connection still waiting out its reconnect delay: it cannot know Redis is full.
    const reconnecting = (run.outages ?? []).some((w) => w.to !== 0 && call.from >= w.to && call.from - w.to <= RECONNECT_BACKOFF_MS);
    const unconnected = call.many ? 'PublishManyError(RedisUnavailableError)' : 'RedisUnavailableError';
    if (reconnecting && (call.error === unconnected || call.error === 'RedisUnavailableError')) continue;
    if (call.error !== expected)
      add(
        'refusals',
        `${what}, called and settled while Redis was full, ${call.error ? `rejected with ${call.error}` : 'resolved'}, not ${expected}`,
      );
  }
}

function entryAt(run: RunRecord, partition: number, offset: string): FuzzLogEntry | undefined {
  return indexOf(run).get(ref(partition, offset));
}

const indexes = new WeakMap<RunRecord, Map<string, FuzzLogEntry>>();

function indexOf(run: RunRecord): Map<string, FuzzLogEntry> {
  let index = indexes.get(run);
  if (!index) {
    index = new Map(run.log.flat().map((e) => [ref(e.partition, e.offset), e]));
    indexes.set(run, index);
  }
  return index;
}

function describeEntry(e: FuzzLogEntry): string {
  const where = e.key === null ? 'keyless' : `key ${e.key}`;
  return `event ${e.data.n} (${e.event}, ${where}, seq ${e.data.seq}${e.to ? `, replay for ${e.to}` : ''}) at ${ref(e.partition, e.offset)}`;
}
