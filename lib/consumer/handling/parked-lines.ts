import type { RedeliveryOptions, ResolvedConsumerOptions } from '../consumer.options';
import { isMalformed, type MalformedEntry, type RawEntry } from '../../wire/codec';
import { compareStreamIds, isStreamId } from '../../wire/stream-id';
import { describeThrown } from '../../util/describe-error';
import { retryDelayMs } from '../../util/backoff';
import { MinHeap } from '../../util/min-heap';

/** The prefix of a parked line's field in its partition's recovery hash. */
export const PARKED_FIELD_PREFIX = 'park:';
/**
 * The prefix of an operator's command to the owner (`parkcmd:retry:*`, `parkcmd:retry:k:<key>`,
 * `parkcmd:give-up:k:<key>`), a field of the same hash that the owner applies and removes.
 */
export const PARKED_COMMAND_PREFIX = 'parkcmd:';
/**
 * The recovery hash's field that holds the oldest parked id (retention keeps the log from there). The
 * owner works it out from the lines it holds and sends it with the lines' changes (`takeChanges`).
 */
export const PARKED_FLOOR_FIELD = 'parkedFloor';

/** An operator's command found in the recovery hash. */
export interface ParkedCommand {
  field: string;
  op: 'retry' | 'give-up';
  /** The key it is for; undefined for every line. */
  key?: string;
  /** `give-up`: the heads it gives up (those the operator saw), so a command applied twice never gives up the next head. */
  heads: string[];
}
/** Up to this many parked keys (or heads), a fetched entry is compared with each rather than looked up. */
const SCAN_LIMIT = 16;
/** The longest error text a line keeps. */
const ERROR_CHARS = 500;

/**
 * A parked line as stored, the value of its `park:<line>` field (JSON, `ids` first: the commit script
 * finds the line's first entry there without decoding it). Times are on Redis's clock.
 */
export interface ParkedLineState {
  /** Stream ids of the parked entries, in log order; the first is the head, the one tried. */
  ids: string[];
  /** The key of the line's messages (`''` for keyless ones); in `'unordered'` mode a line is one message of it. */
  k: string;
  /** Failed attempts of the head, in place and redelivered; 0 for a head not tried yet. */
  a: number;
  /** When the head first failed (ms), 0 when it has not yet. */
  f: number;
  /** When the head is tried next (ms). */
  n: number;
  /** The head's last error, `Name: message`. */
  e: string;
  /** The newest id ever parked in the line: an entry at or before it is in the line already (read again after a restart). */
  t: string;
  /** 1 while a redelivery of the head runs: found so by a new owner, the attempt died with its worker. */
  r: 0 | 1;
  /** Redeliveries of the head that died with their worker (`maxDeliveries` bounds them). */
  c: number;
  /** Redeliveries of the head that failed: the tier of the next wait (0: `delayMs`). Absent in lines stored before it was kept. */
  d?: number;
  /** 1 when an operator gave the head up (`EventrailAdmin.giveUpParked`): it is dead-lettered at its next turn, at once. */
  g?: 1;
}

/** What parking a message that ran out of retries in place (or failing its redelivery) came to. */
export type ParkVerdict = 'parked' | 'give-up';

/** A failure as the retry code knows it. */
export interface ParkedFailure {
  error: unknown;
  /** The attempt that just failed (from 1). */
  attempts: number;
  firstFailedAt: Date;
}

/** What a partition's parked lines need to know. */
export interface ParkedLinesConfig {
  mode: 'key' | 'unordered';
  redelivery: Required<RedeliveryOptions>;
  /**
   * The quick tiers before the `redelivery` ones: `maxRetries` redeliveries, `retryBackoffMs` apart at
   * first, doubling up to `retryBackoffMaxMs` (the same backoff a retry in place has with `'partition'`).
   */
  quick: Pick<ResolvedConsumerOptions, 'maxRetries' | 'retryBackoffMs' | 'retryBackoffMaxMs'>;
  /** Redis's clock (ms): every time a line stores is on it, so skewed workers agree. */
  now: () => number;
  random?: () => number;
}

/**
 * The parked lines of one partition as its owner holds them: loaded once when it takes the partition,
 * changed in memory as messages park, are parked behind, succeed or are given up, and written with the
 * next commit (`takeChanges`), in the same atomic step as the offset (commitOffset-5.lua). A line is a
 * key's failing head and the later messages of that key (`'key'`), or one failing message
 * (`'unordered'`). Lines reference stream ids; the entries stay in the log (retention keeps them).
 */
export class ParkedLines {
  private readonly lines = new Map<string, ParkedLineState>();
  /** Lines changed since the last `takeChanges`: the new state, or null when released. */
  private readonly changed = new Map<string, ParkedLineState | null>();
  /**
   * The line each head leads. A line may carry another mode's name: lines parked by members with the
   * other setting (a rolling deploy that changes `ordering`) are worked under the name they were stored.
   */
  private readonly heads = new Map<string, string>();
  /** `'m:'` lines by key: with `'key'` ordering, later messages of their key wait behind them too. */
  private readonly byKey = new Map<string, Set<string>>();
  /**
   * How many lines each key has (`k:<key>` and `m:` lines of it): every fetched entry asks whether its
   * key has one (`keyHasLines`), without building line names.
   */
  private readonly perKey = new Map<string, number>();
  /** `perKey`'s keys and `heads`' ids while there are few (`SCAN_LIMIT`), compared in turn; undefined when changed. */
  private keyList?: string[];
  private headList?: string[];
  /**
   * When each line is due, as indexed in `dueHeap` (a line `due` handed out, or found busy, is not
   * indexed until `requeue`). An item of the heap whose time is not its line's entry here is stale.
   */
  private readonly dueAt = new Map<string, number>();
  private readonly dueHeap = new MinHeap<readonly [number, string]>((a, b) => a[0] < b[0]);
  /** Every head (stale ones too, skipped while they are no longer a key of `heads`): the oldest is the floor. */
  private readonly headHeap = new MinHeap<string>((a, b) => compareStreamIds(a, b) < 0);
  private readonly random: () => number;

  constructor(private readonly config: ParkedLinesConfig) {
    this.random = config.random ?? Math.random;
  }

  get size(): number {
    return this.lines.size;
  }

  /** True when a line changed since the last `takeChanges`. */
  get hasChanges(): boolean {
    return this.changed.size > 0;
  }

  /** Messages parked in every line. */
  get parkedCount(): number {
    let count = 0;
    for (const line of this.lines.values()) count += line.ids.length;
    return count;
  }

  /**
   * Loads the lines stored in the recovery hash `fields` (as HGETALL gives them); a field that does not
   * parse is dropped and named. With `'key'` ordering, the lines of one key (which `'unordered'` members
   * park one message each) become one line, in log order (`merge`).
   */
  load(fields: Record<string, string>): string[] {
    const dropped: string[] = [];
    for (const [field, value] of Object.entries(fields)) {
      if (!field.startsWith(PARKED_FIELD_PREFIX)) continue;
      const line = field.slice(PARKED_FIELD_PREFIX.length);
      const state = parseLine(value);
      if (state) this.add(line, state);
      else {
        dropped.push(field);
        this.changed.set(line, null);
      }
    }
    if (this.config.mode === 'key') for (const [key, lines] of [...this.byKey]) this.merge(key, lines);
    return dropped;
  }

  /**
   * Makes the lines of `key` one line `k:<key>` (stored so with the next commit, the others released):
   * its ids in log order, the oldest head's state (its attempts, tier, error, due time), and the
   * earliest first failure when that head has failed. Lines redelivered each on its own tier would hand
   * the key's messages over out of log order.
   */
  private merge(key: string, inherited: ReadonlySet<string>): void {
    const own = `k:${key}`;
    const names = [...inherited];
    if (this.lines.has(own)) names.push(own);
    if (names.length < 2) return;
    const states = names.map((name) => this.lines.get(name)!);
    const oldest = states.reduce((a, b) => (compareStreamIds(b.ids[0], a.ids[0]) < 0 ? b : a));
    const ids = [...new Set(states.flatMap((state) => state.ids))].sort(compareStreamIds);
    const t = states.reduce((newest, state) => (compareStreamIds(state.t, newest) > 0 ? state.t : newest), oldest.t);
    const failedSince = states.filter((state) => state.f > 0).map((state) => state.f);
    const merged: ParkedLineState = { ...oldest, ids, t, f: oldest.f > 0 ? Math.min(...failedSince) : 0 };
    for (const [i, name] of names.entries()) {
      this.remove(name, states[i]);
      this.changed.set(name, null);
    }
    this.add(own, merged);
    this.mark(own, merged);
  }

  /**
   * The line `entry` belongs to: the one it leads, else its key's (`'key'`: `k:<key>`, or the newest
   * line another mode parked a message of that key in) or its own (`'unordered'`: `m:<offset>`).
   */
  lineOf(entry: RawEntry): string {
    const led = this.heads.get(entry.offset);
    if (led !== undefined) return led;
    if (this.config.mode !== 'key') return `m:${entry.offset}`;
    const key = entry.key ?? '';
    const own = `k:${key}`;
    if (this.lines.has(own)) return own;
    const inherited = this.byKey.get(key);
    if (!inherited) return own;
    let newest: string | undefined;
    for (const line of inherited) if (!newest || compareStreamIds(this.lines.get(line)!.t, this.lines.get(newest)!.t) > 0) newest = line;
    return newest ?? own;
  }

  /**
   * True when `entry` is in a line already. A line is stored with the commit that parks its message,
   * which may leave the offset before it (a message before it was still running), so the next owner's
   * fetch reads it again: it is the line's to redeliver, not the fetch's. (`'key'` mode keeps it once
   * through `holds` and `behind`.)
   */
  has(entry: RawEntry | MalformedEntry): boolean {
    if (this.lines.size === 0) return false;
    if (this.isHeadId(entry.offset)) return true;
    if (isMalformed(entry)) return false;
    const key = entry.key ?? '';
    if (!this.keyHasLines(key)) return false;
    const names = [`k:${key}`, ...(this.byKey.get(key) ?? [])];
    return names.some((name) => this.lines.get(name)?.ids.includes(entry.offset) ?? false);
  }

  /** True when `entry` must wait behind a parked line (`'key'` mode: its key is parked). Malformed entries wait for nobody. */
  holds(entry: RawEntry | MalformedEntry): entry is RawEntry {
    if (this.lines.size === 0 || this.config.mode !== 'key' || isMalformed(entry)) return false;
    // A `k:<key>` line or an `m:` line of the key (`byKey`): what `perKey` counts.
    return this.keyHasLines(entry.key ?? '');
  }

  /** Parks `entry` behind its key's line (it must `hold` it). An entry the line already has (read again) is not added twice. */
  behind(entry: RawEntry): void {
    const line = this.lineOf(entry);
    const state = this.lines.get(line);
    if (!state || compareStreamIds(entry.offset, state.t) <= 0) return;
    state.ids.push(entry.offset);
    state.t = entry.offset;
    this.mark(line, state);
  }

  /**
   * A message ran out of retries: in place (a new line, or the head of its line tried for the first
   * time), or in its redelivery (the head of its line). `give-up` when its redelivery budget is spent
   * (the caller dead-letters it, then calls `release`).
   */
  failed(entry: RawEntry, failure: ParkedFailure): ParkVerdict {
    const { redelivery, now } = this.config;
    const at = now();
    const line = this.lineOf(entry);
    let state = this.lines.get(line);
    if (state && state.ids[0] !== entry.offset) {
      // Not its head: cannot happen (a held entry is never tried), but the line stays in order if it does.
      return 'give-up';
    }
    if (!state) {
      state = { ids: [entry.offset], k: entry.key ?? '', a: 0, f: 0, n: 0, e: '', t: entry.offset, r: 0, c: 0 };
      this.add(line, state);
    }
    // The first failure as the retry code saw it, moved onto Redis's clock; later ones are failed redeliveries.
    if (state.f === 0) {
      state.f = at - Math.max(0, Date.now() - failure.firstFailedAt.getTime());
      state.d = 0;
    } else {
      state.d = (state.d ?? 0) + 1;
    }
    state.a = Math.max(state.a + 1, failure.attempts);
    state.e = errorText(failure.error);
    state.r = 0;
    const left = state.f + redelivery.maxAgeMs - at;
    if (left <= 0) {
      this.mark(line, state);
      return 'give-up';
    }
    state.n = at + Math.min(left, this.delayMs(state));
    this.mark(line, state);
    return 'parked';
  }

  /** The head of `line` is done (handled or dead-lettered): the next entry becomes the head, due at once; the line ends with its last entry. */
  release(line: string): void {
    const state = this.lines.get(line);
    if (!state) return;
    this.heads.delete(state.ids.shift()!);
    this.headList = undefined;
    if (state.ids.length === 0) {
      this.remove(line, state);
      this.changed.set(line, null);
      return;
    }
    this.heads.set(state.ids[0], line);
    this.headHeap.push(state.ids[0]);
    Object.assign(state, { a: 0, f: 0, n: 0, e: '', r: 0, c: 0, d: 0 });
    delete state.g;
    this.mark(line, state);
  }

  /** A redelivery of the head of `line` starts: stored before it runs, so a crash during it is counted by the next owner. */
  starting(line: string): void {
    const state = this.lines.get(line);
    if (!state) return;
    state.r = 1;
    this.mark(line, state);
  }

  /** A redelivery was cut short (a stop): the head is due again, no attempt counted. */
  abandoned(line: string): void {
    const state = this.lines.get(line);
    if (!state) return;
    state.r = 0;
    this.mark(line, state);
  }

  /**
   * A graceful stop: redeliveries still running are not crashes (their handler was cut off by the
   * shutdown timeout, as a fetch's are); stored so with the final commit.
   */
  clearRunning(): void {
    for (const [line, state] of this.lines) {
      if (state.r !== 1) continue;
      state.r = 0;
      this.mark(line, state);
    }
  }

  /** Lines whose redelivery a dead owner left running: each counts one crash and is due at once. Called once, after `load`. */
  countCrashes(): void {
    for (const [line, state] of this.lines) {
      if (state.r !== 1) continue;
      state.r = 0;
      state.c++;
      state.n = 0;
      this.mark(line, state);
    }
  }

  /** Applies an operator's command: every line (or the lines of its key) due at once, the heads given up with `give-up`. Returns how many lines. */
  apply(command: ParkedCommand): number {
    let count = 0;
    for (const [line, state] of this.lines) {
      if (command.key !== undefined && state.k !== command.key) continue;
      if (command.op === 'give-up') {
        if (!command.heads.includes(state.ids[0])) continue;
        state.g = 1;
      }
      state.n = 0;
      this.mark(line, state);
      count++;
    }
    return count;
  }

  /** The operators' commands among the recovery hash's `fields`. */
  static commands(fields: Record<string, string>): ParkedCommand[] {
    const commands: ParkedCommand[] = [];
    for (const [field, value] of Object.entries(fields)) {
      if (!field.startsWith(PARKED_COMMAND_PREFIX)) continue;
      const rest = field.slice(PARKED_COMMAND_PREFIX.length);
      const op = rest.startsWith('retry:') ? 'retry' : rest.startsWith('give-up:') ? 'give-up' : undefined;
      if (!op) continue;
      const target = rest.slice(op.length + 1);
      let heads: string[] = [];
      try {
        const parsed: unknown = JSON.parse(value);
        if (Array.isArray(parsed)) heads = parsed.filter((id): id is string => typeof id === 'string');
      } catch {
        // A retry's value is only its time; a give-up without heads gives up nothing.
      }
      commands.push({ field, op, key: target === '*' ? undefined : target.startsWith('k:') ? target.slice(2) : undefined, heads });
    }
    return commands;
  }

  /** True when `entry` is the head of its line (it is being redelivered). */
  isHead(entry: RawEntry | MalformedEntry): entry is RawEntry {
    return !isMalformed(entry) && this.isHeadId(entry.offset);
  }

  state(line: string): Readonly<ParkedLineState> | undefined {
    return this.lines.get(line);
  }

  /**
   * Lines due now, oldest due first, and when the next one falls due (Redis clock ms), if any. The lines
   * handed out are taken out of the due index, and so are `busy` ones found due (not handed out): the
   * caller gives each back with `requeue` once it is no longer running. At most `limit` lines; the
   * others stay due. A heap, not a sort of every line: with thousands of lines cycling through their
   * tiers this runs at every line's end.
   */
  due(busy?: ReadonlyMap<string, unknown>, limit = Infinity): { lines: string[]; nextAt?: number } {
    const at = this.config.now();
    const ready: string[] = [];
    while (ready.length < limit) {
      const top = this.dueHeap.peek();
      if (!top) break;
      const [n, line] = top;
      if (this.dueAt.get(line) !== n) {
        this.dueHeap.pop(); // stale: the line's time changed, or it is not indexed
        continue;
      }
      if (n > at) break;
      this.dueHeap.pop();
      this.dueAt.delete(line);
      if (!busy?.has(line)) ready.push(line);
    }
    if (this.dueHeap.size > 2 * this.dueAt.size + 1024) this.dueHeap.filter(([n, line]) => this.dueAt.get(line) === n);
    return { lines: ready, nextAt: this.dueHeap.peek()?.[0] };
  }

  /** A line `due` took out of the index (handed out, or busy) is indexed again at its due time: its run ended. */
  requeue(line: string): void {
    const state = this.lines.get(line);
    if (state) this.index(line, state);
  }

  /** The oldest parked id (the first of the oldest line), which retention keeps; undefined when nothing is parked. */
  get floor(): string | undefined {
    for (;;) {
      const top = this.headHeap.peek();
      if (top === undefined || this.heads.has(top)) return top;
      this.headHeap.pop();
    }
  }

  /**
   * The lines changed since the last call, as the commit script takes them: field and state, `''` for a
   * released line, then the floor (`PARKED_FLOOR_FIELD`, `''` when nothing is parked), so the script
   * writes it without reading every line back.
   */
  takeChanges(): Array<[string, string]> {
    if (this.changed.size === 0) return [];
    const changes: Array<[string, string]> = [];
    for (const [line, state] of this.changed) changes.push([PARKED_FIELD_PREFIX + line, state ? JSON.stringify(state) : '']);
    this.changed.clear();
    if (this.headHeap.size > 2 * this.heads.size + 1024) this.headHeap.filter((id) => this.heads.has(id));
    changes.push([PARKED_FLOOR_FIELD, this.floor ?? '']);
    return changes;
  }

  /** Changes taken by a commit that did not land: written again with the next one (the floor is worked out again). */
  restore(changes: ReadonlyArray<readonly [string, string]>): void {
    for (const [field] of changes) {
      if (!field.startsWith(PARKED_FIELD_PREFIX)) continue;
      const line = field.slice(PARKED_FIELD_PREFIX.length);
      if (!this.changed.has(line)) this.changed.set(line, this.lines.get(line) ?? null);
    }
  }

  private add(line: string, state: ParkedLineState): void {
    const old = this.lines.get(line);
    if (old) this.remove(line, old);
    this.lines.set(line, state);
    this.heads.set(state.ids[0], line);
    this.headList = this.keyList = undefined;
    this.headHeap.push(state.ids[0]);
    this.index(line, state);
    const key = keyOfLine(line, state);
    if (key !== undefined) this.perKey.set(key, (this.perKey.get(key) ?? 0) + 1);
    if (line.startsWith('m:')) {
      const lines = this.byKey.get(state.k) ?? new Set<string>();
      this.byKey.set(state.k, lines.add(line));
    }
  }

  private remove(line: string, state: ParkedLineState): void {
    this.headList = this.keyList = undefined;
    const key = keyOfLine(line, state);
    if (this.lines.delete(line) && key !== undefined) {
      const left = (this.perKey.get(key) ?? 1) - 1;
      if (left > 0) this.perKey.set(key, left);
      else this.perKey.delete(key);
    }
    this.dueAt.delete(line);
    if (state.ids.length > 0 && this.heads.get(state.ids[0]) === line) this.heads.delete(state.ids[0]);
    const lines = this.byKey.get(state.k);
    if (lines?.delete(line) && lines.size === 0) this.byKey.delete(state.k);
  }

  /**
   * True when `key` has a line. A fetched entry's key and id are strings just read, whose hash V8 has
   * not worked out yet: a Map lookup computes it (hundreds of ns each, more than the rest of the
   * entry's routing), where comparing against a few parked keys in turn does not.
   */
  private keyHasLines(key: string): boolean {
    if (this.perKey.size > SCAN_LIMIT) return this.perKey.has(key);
    const list = (this.keyList ??= [...this.perKey.keys()]);
    for (let i = 0; i < list.length; i++) if (list[i] === key) return true;
    return false;
  }

  /** True when `id` heads a line; see `keyHasLines` for why a few are compared in turn. */
  private isHeadId(id: string): boolean {
    if (this.heads.size > SCAN_LIMIT) return this.heads.has(id);
    const list = (this.headList ??= [...this.heads.keys()]);
    for (let i = 0; i < list.length; i++) if (list[i] === id) return true;
    return false;
  }

  /** `line` changed: stored with the next commit, and indexed at its (maybe new) due time. */
  private mark(line: string, state: ParkedLineState): void {
    this.changed.set(line, state);
    if (this.lines.get(line) === state) this.index(line, state);
  }

  private index(line: string, state: ParkedLineState): void {
    if (this.dueAt.get(line) === state.n) return;
    this.dueAt.set(line, state.n);
    this.dueHeap.push([state.n, line]);
  }

  /**
   * The wait before the head's next redelivery, with equal jitter: the quick tiers first (the retry
   * backoff), then `delayMs` times `factor` per later redelivery that failed, capped at `maxDelayMs`.
   */
  private delayMs(state: ParkedLineState): number {
    const failed = state.d ?? 0;
    const { maxRetries, retryBackoffMs, retryBackoffMaxMs } = this.config.quick;
    if (failed < maxRetries) return retryDelayMs(failed + 1, retryBackoffMs, retryBackoffMaxMs, this.random);
    const { delayMs, factor, maxDelayMs } = this.config.redelivery;
    const full = Math.min(maxDelayMs, delayMs * factor ** Math.min(failed - maxRetries, 60));
    return Math.round(full / 2 + this.random() * (full / 2));
  }
}

/**
 * The key a line is counted under in `perKey`: the key it is named by (`k:<key>`), or its message's (an
 * `m:` line); none for a line stored under another name, which holds no message of its key.
 */
function keyOfLine(line: string, state: ParkedLineState): string | undefined {
  if (line.startsWith('k:')) return line.slice(2);
  return line.startsWith('m:') ? state.k : undefined;
}

function errorText(error: unknown): string {
  const { name, message } = describeThrown(error);
  const text = `${name}: ${message}`;
  return text.length > ERROR_CHARS ? `${text.slice(0, ERROR_CHARS - 1)}…` : text;
}

/** A stored line, or undefined when it is not one this version wrote. */
export function parseLine(value: string): ParkedLineState | undefined {
  let parsed: unknown;
  try {
    parsed = JSON.parse(value);
  } catch {
    return undefined;
  }
  const s = parsed as Partial<ParkedLineState> | null;
  if (typeof s !== 'object' || s === null || !Array.isArray(s.ids) || s.ids.length === 0) return undefined;
  if (!s.ids.every((id) => typeof id === 'string' && isStreamId(id))) return undefined;
  const numbers = [s.a, s.f, s.n, s.c];
  if (!numbers.every((n) => typeof n === 'number' && Number.isFinite(n))) return undefined;
  if (typeof s.t !== 'string' || !isStreamId(s.t) || typeof s.k !== 'string') return undefined;
  const state: ParkedLineState = {
    ids: s.ids,
    k: s.k,
    a: s.a!,
    f: s.f!,
    n: s.n!,
    e: typeof s.e === 'string' ? s.e : '',
    t: s.t,
    r: s.r === 1 ? 1 : 0,
    c: s.c!,
  };
  if (s.g === 1) state.g = 1;
  if (typeof s.d === 'number' && Number.isInteger(s.d) && s.d >= 0) state.d = s.d;
  return state;
}
