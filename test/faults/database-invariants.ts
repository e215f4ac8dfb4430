/** One entry of the log, as the database schedules read it. */
export interface DatabaseLogEntry {
  partition: number;
  offset: string;
  id: string;
  key: string;
  n: number;
}

/** One committed effect row, in the order the database numbered them (`seq`). */
export interface EffectRow {
  seq: number;
  eventId: string;
  key: string;
}

/** Everything a database schedule leaves to check, collected after the group caught up. */
export interface DatabaseRunRecord {
  /** Events whose publish resolved, or whose outbox transaction committed. */
  accepted: ReadonlyArray<{ n: number; id: string }>;
  log: readonly DatabaseLogEntry[][];
  effects: readonly EffectRow[];
  /** Event ids of the group's inbox rows. */
  inbox: readonly string[];
  /** The group's dead letters: none is expected (no event is made to fail), so each says why it was given up. */
  deadLetters: ReadonlyArray<{ eventId: string | null; reason: string; error: string; attempts: number }>;
  /** Outbox rows of this log still in the table. */
  outboxLeft: number;
  /** Committed offsets that moved back (from the sampler). */
  backwardMoves: readonly string[];
  /** Worker exits that were not the test's doing. */
  unexpectedExits: readonly string[];
  /** Set when the group did not catch up (or the relay did not drain) in time. */
  drainFailure?: string;
}

export interface DatabaseViolation {
  invariant:
    'delivered' | 'exactly-once' | 'inbox-agrees' | 'key-order' | 'appended-once' | 'dead-letters' | 'offsets' | 'workers' | 'drained';
  detail: string;
}

const LIMIT_PER_INVARIANT = 10;

/**
 * The invariants of a database schedule:
 * - delivered: every accepted event is in the log, and every entry of the log has its effect;
 * - exactly-once: no event has two effect rows, whatever was retried or redelivered;
 * - inbox-agrees: the inbox rows and the effect rows name the same events (they commit together or not at all);
 * - key-order: per key, the effects were committed in the order of the key's entries in the log;
 * - appended-once: no event id twice in the log (the relay's repeats absorbed by dedup);
 * - dead-letters: none (a database fault is transient: retries, not a give-up);
 * - offsets: no committed offset moved back; workers: no worker died but by the test's hand;
 * - drained: the group caught up and the relay emptied the outbox.
 */
export function checkDatabaseRun(run: DatabaseRunRecord): DatabaseViolation[] {
  const out: DatabaseViolation[] = [];
  const add = (invariant: DatabaseViolation['invariant'], detail: string): void => {
    if (out.filter((v) => v.invariant === invariant).length < LIMIT_PER_INVARIANT) out.push({ invariant, detail });
  };
  if (run.drainFailure) add('drained', run.drainFailure);
  if (run.outboxLeft > 0) add('drained', `${run.outboxLeft} outbox rows were never relayed`);
  for (const exit of run.unexpectedExits) add('workers', exit);
  for (const move of run.backwardMoves) add('offsets', move);
  for (const d of run.deadLetters)
    add('dead-letters', `event ${d.eventId} dead-lettered (${d.reason}, ${d.attempts} attempts): ${d.error}`);

  // Per event id: where it first is in the log (and how often it is there).
  const entries = new Map<string, { entry: DatabaseLogEntry; copies: number }>();
  for (const entry of run.log.flat()) {
    const seen = entries.get(entry.id);
    if (seen) seen.copies++;
    else entries.set(entry.id, { entry, copies: 1 });
  }
  for (const [id, { entry, copies }] of entries) {
    if (copies > 1) add('appended-once', `event ${entry.n} (${id}) is in the log ${copies} times`);
  }
  for (const a of run.accepted) if (!entries.has(a.id)) add('delivered', `event ${a.n} (${a.id}) was accepted but is not in the log`);

  const effects = new Map<string, EffectRow[]>();
  for (const effect of run.effects) effects.set(effect.eventId, [...(effects.get(effect.eventId) ?? []), effect]);
  for (const [id, { entry }] of entries)
    if (!effects.has(id)) add('delivered', `event ${entry.n} (${id}) at ${where(entry)} has no effect`);
  for (const [id, rows] of effects) {
    if (rows.length > 1) add('exactly-once', `event ${id} has ${rows.length} effect rows (seq ${rows.map((r) => r.seq).join(', ')})`);
  }

  const inbox = new Set(run.inbox);
  for (const id of effects.keys()) if (!inbox.has(id)) add('inbox-agrees', `event ${id} has an effect but no inbox row`);
  for (const id of inbox) if (!effects.has(id)) add('inbox-agrees', `event ${id} has an inbox row but no effect`);

  checkKeyOrder(run, entries, add);
  return out;
}

function checkKeyOrder(
  run: DatabaseRunRecord,
  entries: ReadonlyMap<string, { entry: DatabaseLogEntry }>,
  add: (invariant: DatabaseViolation['invariant'], detail: string) => void,
): void {
  // Each event's place among its key's entries, in stream order (a key lives in one partition).
  const place = new Map<string, number>();
  const perKey = new Map<string, number>();
  for (const partition of run.log) {
    for (const entry of partition) {
      if (place.has(entry.id)) continue;
      const index = perKey.get(entry.key) ?? 0;
      place.set(entry.id, index);
      perKey.set(entry.key, index + 1);
    }
  }
  const last = new Map<string, { seq: number; index: number; id: string }>();
  for (const effect of [...run.effects].sort((a, b) => a.seq - b.seq)) {
    const index = place.get(effect.eventId);
    if (index === undefined) continue;
    const before = last.get(effect.key);
    if (before && index < before.index) {
      const of = (id: string): string => `event ${entries.get(id)?.entry.n} (${id})`;
      add(
        'key-order',
        `key ${effect.key}: ${of(effect.eventId)}, entry ${index} of the key, committed its effect (seq ${effect.seq}) ` +
          `after ${of(before.id)}, entry ${before.index} (seq ${before.seq})`,
      );
    }
    if (!before || index > before.index) last.set(effect.key, { seq: effect.seq, index, id: effect.eventId });
  }
}

function where(entry: DatabaseLogEntry): string {
  return `${entry.partition}|${entry.offset} (key ${entry.key})`;
}
