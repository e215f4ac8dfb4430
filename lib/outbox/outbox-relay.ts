import { Inject, Injectable, Logger, OnApplicationBootstrap, OnModuleDestroy, OnModuleInit } from '@nestjs/common';
import { retryDelayMs } from '../util/backoff';
import { EVENTRAIL_OPTIONS } from '../config/eventrail.constants';
import type { ResolvedLogOptions } from '../config/log.options';
import type { EventrailMetrics } from '../metrics/eventrail-metrics';
import type { ResolvedPublisherOptions } from '../publisher/publisher.options';
import { EventrailError } from '../errors/eventrail.error';
import { InvalidOptionError } from '../errors/invalid-option.error';
import { RedisUnavailableError } from '../errors/redis-unavailable.error';
import { ReplicationTimeoutError } from '../errors/replication-timeout.error';
import { MetricsHooks } from '../metrics/eventrail-metrics';
import { EventrailPublisher, type PublishInput } from '../publisher/eventrail.publisher';
import { describeError } from '../util/describe-error';
import type { RelaySession, Row } from './connectors/outbox-connector';
import { EVENTRAIL_OUTBOX_OPTIONS } from './outbox.constants';
import { MAX_ROW_READ_BYTES, type ResolvedOutboxOptions } from './outbox.options';
import { logDefaultSql, notifyChannel, ownsUnlabelledSql, qualified, RELAY_LOCK_NAMESPACE } from './outbox-schema';
import { readOutboxStatus } from './outbox-status.reader';

/** What the relay of this process did since it started. */
export interface OutboxRelayStats {
  /** This process's relay holds the lock and is appending. */
  active: boolean;
  /** Rows appended to the log (duplicates included) and deleted. */
  relayed: number;
  /** Of those, appends producer dedup found already done (a batch repeated after a crash or takeover). */
  duplicates: number;
  batches: number;
  /** Rows marked `failed`: they no longer pass the publisher's checks. */
  failedRows: number;
  /** Times this process became the active relay. */
  takeovers: number;
}

/** Rows read for one batch; `full` when more were waiting than the batch could hold (by count or bytes). */
interface Batch {
  rows: Row[];
  full: boolean;
}

/** Bound on how long shutdown waits for the batch in hand before it closes the session anyway. */
const STOP_TIMEOUT_MS = 10_000;
/** PostgreSQL's SQLSTATE for an index row too large for a btree page, among other limits. */
const PROGRAM_LIMIT_EXCEEDED = '54000';
/** What an unread row's log line shows of its event id: the publisher takes ids of up to 200 characters. */
const UNREAD_EVENT_ID_CHARS = 200;
/** An unread row's key is kept for the held keys up to the bytes of the longest key the publisher takes (1024 characters). */
const UNREAD_KEY_BYTES = 4096;

/**
 * Appends committed outbox rows to the log, then deletes them.
 *
 * One relay per log (prefix) and table is active: the one whose dedicated
 * session holds a session-level advisory lock. The others wait inside
 * `pg_advisory_lock` on their own session, which costs no polling and takes
 * over as soon as the holder's session ends (a crash closes its connection;
 * PostgreSQL releases the lock with it). The rows and the lock live in the same
 * database, so the lock needs no clock and no fencing token: a relay cut off
 * from the database cannot delete, and what it appends meanwhile is appended
 * again by its successor with the same event ids, which producer dedup absorbs.
 *
 * Order: rows are read in `id` order and appended with one `publishMany` per
 * batch, which keeps order per partition; rows are deleted only once Redis has
 * acknowledged every append of the batch.
 */
@Injectable()
export class EventrailOutboxRelay implements OnModuleInit, OnApplicationBootstrap, OnModuleDestroy {
  private readonly logger = new Logger(EventrailOutboxRelay.name);
  private readonly counters = { relayed: 0, duplicates: 0, batches: 0, failedRows: 0, takeovers: 0 };
  private stopping = false;
  private active = false;
  private loop?: Promise<void>;
  private session?: RelaySession;
  private lost?: Error;
  private notified = false;
  private wake?: (reason: 'notify' | 'stop') => void;
  private readonly metrics: MetricsHooks;
  private lastSample = 0;
  /** Rows appended and acknowledged, not yet deleted: deleted by the next read's statement, or in the background. */
  private appended: string[] = [];
  /** Ids being deleted through the connector's pool (off the relay's path); reads leave them out until done. */
  private readonly deleting = new Set<string>();
  private readonly backgroundDeletes = new Set<Promise<void>>();
  /** The next batch, read while the current one is appended (only after a full batch: more is likely waiting). */
  private prefetched?: Promise<Batch>;
  /**
   * Keys this relay failed a row of in the batch in hand, with that row's id: the batch's later rows of
   * the key wait. Every read leaves out the keys held behind a failed row itself, in its own statement,
   * whoever set the mark (another relay process, an operator), so this covers only the rows read before
   * the mark: it starts empty with each batch.
   */
  private held = new Map<string, bigint>();
  /**
   * Refused rows whose key is too long for the failed-rows index (btree takes about 2700 bytes, the
   * publisher up to 4 KiB), by id, with their key: they cannot be marked, so this relay holds them, and
   * reads leave them and their key's later rows out. Forgotten every `relay.pollIntervalMs`, so they are
   * read and judged again (a fix needs no mark to clear; a delete releases the key).
   */
  private readonly unmarked = new Map<string, string | null>();
  private unmarkedSince = 0;
  /** Ids of unmarked rows already logged and counted, so judging one again is silent. */
  private readonly unmarkedReported = new Set<string>();

  constructor(
    @Inject(EVENTRAIL_OUTBOX_OPTIONS) private readonly options: ResolvedOutboxOptions,
    @Inject(EVENTRAIL_OPTIONS) private readonly eventrail: ResolvedLogOptions & ResolvedPublisherOptions & { metrics: EventrailMetrics },
    private readonly publisher: EventrailPublisher,
  ) {
    this.metrics = new MetricsHooks(eventrail.metrics);
  }

  onModuleInit(): void {
    if (this.options.relay.enabled && this.eventrail.dedupWindowMs === 0) {
      throw new InvalidOptionError(
        'outbox.relay.enabled',
        true,
        "EventrailModule's dedupWindowMs above 0 (the relay appends each row with its event id, and dedup absorbs a batch appended twice), or relay.enabled false",
      );
    }
    const { poolMax } = this.options.connector;
    if (this.options.relay.enabled && poolMax !== undefined && poolMax < 2) {
      throw new InvalidOptionError(
        'outbox.connector',
        `a connector on a pool of max ${poolMax}`,
        'a pool with a max of 2 or more (the relay holds one connection for as long as it is active, so publish and the inbox would wait forever for another), or relay.enabled false',
      );
    }
  }

  onApplicationBootstrap(): void {
    if (this.options.relay.enabled) this.loop = this.run();
  }

  async onModuleDestroy(): Promise<void> {
    this.stopping = true;
    this.wake?.('stop');
    // A standby is blocked inside pg_advisory_lock: only closing its connection ends that.
    if (!this.active) await this.closeSession();
    const timer = setTimeout(() => void this.closeSession(), STOP_TIMEOUT_MS);
    await this.loop;
    clearTimeout(timer);
    await Promise.all(this.backgroundDeletes);
  }

  isActive(): boolean {
    return this.active;
  }

  stats(): OutboxRelayStats {
    return { active: this.active, ...this.counters };
  }

  private async run(): Promise<void> {
    let failures = 0;
    while (!this.stopping) {
      let delay = 0;
      try {
        await this.lead();
        failures = 0;
      } catch (error) {
        if (this.stopping) break;
        delay = retryDelayMs(++failures, this.options.relay.retryBackoffMs, this.options.relay.retryBackoffMaxMs);
        this.logger.warn(
          `Outbox relay of ${this.options.outboxTable} lost its database session (${describeError(error)}); retrying in ${delay} ms`,
        );
      } finally {
        this.active = false;
        await this.closeSession();
      }
      if (delay > 0) await this.pause(delay, false);
    }
  }

  /** Takes the lock (waiting for it as long as another relay holds it), then relays until stopped or the session fails. */
  private async lead(): Promise<void> {
    const { connector, outboxTable, relay } = this.options;
    this.lost = undefined;
    this.prefetched = undefined; // a read on an earlier session
    this.unmarked.clear();
    const session = await connector.session();
    this.session = session;
    session.onLost((error) => {
      this.lost = error;
      this.wake?.('stop');
    });
    // A standby whose process died leaves its backend waiting for the lock unless the server checks the socket (PostgreSQL 14+).
    await session.query(`set client_connection_check_interval = 1000`).catch(() => undefined);
    // The read's estimated cost grows with the held rows it may step over (one index probe each), which
    // would make PostgreSQL compile it with JIT, for far longer than it runs (0.6 s against 0.16 s).
    await session.query(`set jit = off`).catch(() => undefined);
    await session.query(`select pg_advisory_lock(${RELAY_LOCK_NAMESPACE}, hashtext($1))`, [
      `relay ${this.eventrail.prefix} ${outboxTable}`,
    ]);
    if (this.stopping) return;
    this.active = true;
    this.counters.takeovers++;
    const listening = await session.listen(notifyChannel(outboxTable), () => this.poke());
    this.logger.log(
      `Outbox relay of ${outboxTable} is active for log "${this.eventrail.prefix}"${listening ? '' : ` (no LISTEN: polling every ${relay.pollIntervalMs} ms)`}`,
    );
    await this.warnUnowned(session);
    let redisFailures = 0;
    while (!this.stopping) {
      if (this.lost) throw this.lost;
      if (Date.now() - this.unmarkedSince >= relay.pollIntervalMs) {
        this.unmarked.clear();
        this.unmarkedSince = Date.now();
      }
      const outcome = await this.relayBatch(session);
      if (outcome === 'redis-down') {
        redisFailures++;
        await this.pause(retryDelayMs(redisFailures, relay.retryBackoffMs, relay.retryBackoffMaxMs), false);
        continue;
      }
      redisFailures = 0;
      await this.sample(session);
      if (outcome === 'drained') await this.pause(relay.pollIntervalMs, true);
    }
    // Stopping between batches: what Redis acknowledged goes now, not as a successor's duplicates.
    await (this.prefetched as Promise<Batch> | undefined)?.catch(() => undefined); // set by relayBatch
    this.prefetched = undefined;
    await Promise.all(this.backgroundDeletes);
    if (this.appended.length > 0 && !this.lost) await this.deleteAppended(session);
  }

  /**
   * One batch: delete the previous batch and read this one in one statement (or take it from the read
   * made while the previous one was appended), append it, and delete it at once only when nothing more
   * is waiting. `more` when the next batch should be read at once.
   */
  private async relayBatch(session: RelaySession): Promise<'more' | 'drained' | 'redis-down'> {
    const { outboxTable } = this.options;
    const prefetched = this.prefetched;
    this.prefetched = undefined;
    const { rows, full } = await (prefetched ?? this.deleteAndRead(session, []));
    this.held = new Map();
    if (rows.length === 0) return this.notified ? 'more' : 'drained';
    const kept: Row[] = [];
    const inputs: PublishInput[] = [];
    for (const row of rows) {
      // Behind a row failed in this batch (or after this batch was read): it waits, and the next reads leave it out.
      if (this.isHeld(row)) continue;
      if (row.unread === true) {
        await this.fail(
          session,
          row,
          `its columns are ${String(row.bytes)} bytes, over the ${this.rowReadBytes()} the relay reads of one row (the larger of relay.maxBatchBytes and maxPayloadBytes, at most ${MAX_ROW_READ_BYTES}): not read`,
        );
        continue;
      }
      try {
        inputs.push(toPublishInput(row));
        kept.push(row);
      } catch (error) {
        await this.fail(session, row, `its data or headers are not JSON (${describeError(error)})`);
      }
    }
    if (inputs.length === 0) return 'more';
    let results;
    // The data goes as stored: the JSON text `toPublishInput` parsed (so it is JSON), checked but not serialised again.
    const appending = this.publisher.publishStored(
      inputs,
      kept.map((row) => row.data as string),
    );
    // A full batch: read the next one meanwhile (PostgreSQL and Redis work at once). Rows of the same key
    // as one in this batch have higher ids (the key lock), so the next batch never overtakes this one.
    // Only the rows being appended are left out of it: a row failed here and fixed at once must be read
    // again ahead of its key's later rows, which its mark no longer holds.
    if (full) {
      this.prefetched = this.deleteAndRead(
        session,
        kept.map((row) => String(row.id)),
      );
      this.prefetched.catch(() => undefined); // awaited by the next batch, or below
    }
    try {
      results = await appending;
    } catch (error) {
      // Not appended: this batch is read again, so the read made after it is stale.
      await this.prefetched?.catch(() => undefined);
      this.prefetched = undefined;
      if (error instanceof RedisUnavailableError || error instanceof ReplicationTimeoutError || !(error instanceof EventrailError)) {
        this.logger.warn(
          `Outbox relay could not append ${rows.length} row(s) of ${outboxTable} (${describeError(error)}); they wait and are retried`,
        );
        return 'redis-down';
      }
      if ((await this.markFailed(session, kept, inputs)) > 0) return 'more';
      this.logger.warn(`Outbox relay could not append ${kept.length} row(s) of ${outboxTable} (${describeError(error)}); retrying`);
      return 'redis-down';
    }
    this.appended.push(...kept.map((row) => String(row.id)));
    for (const row of kept) this.unmarkedReported.delete(String(row.id));
    const more = full || this.notified || this.prefetched !== undefined;
    // Nothing more waits: delete now, but on another connection, so a row committed meanwhile is read at once.
    if (!more) this.deleteInBackground();
    this.counters.batches++;
    this.counters.relayed += kept.length;
    const duplicates = results.filter((result) => result.duplicate).length;
    this.counters.duplicates += duplicates;
    this.metrics.emit('onOutboxRelayed', outboxTable, kept.length, duplicates);
    return more ? 'more' : 'drained';
  }

  /**
   * The next rows in `id` order, after deleting the ones appended last. The read cannot see that
   * statement's own delete (one snapshot), so it leaves those ids out itself.
   *
   * Bounded by bytes as well as rows: `octet_length` gives a stored value's length without fetching it,
   * of every column that can be large, and `data` and `headers` are returned only for the rows that fit
   * in `relay.maxBatchBytes` (the first always), and for no row over the one-row bound: that one comes
   * back `unread`, to be failed, with only as much of its event id and key as the log line and the held
   * keys need (a key longer than the publisher takes is left out: no published row can share it).
   *
   * This log's rows only, and the rows without a log when this log owns them (the `log` column's default
   * names it): those are claimed, in the same statement, by writing this log into them, and a row another
   * log's relay claimed first is not returned, so a row reaches one log even while the owner changes.
   *
   * A key held behind a failed row of this log is left out by the statement itself, so a mark that
   * another process set is obeyed from the next read on: a row is left out when a failed row of its key
   * has a lower id, looked up in the partial index on failed rows (one probe per keyed row scanned,
   * whatever the number of held keys). With no keyed failed row of this log, one look at that index for
   * the whole statement stands in for them (asked in the index's order, so PostgreSQL walks the index
   * rather than the table even before it has statistics), and the read is the plain scan in `id` order.
   *
   * The candidates are chosen, claimed and bounded on their ids and lengths alone; the wide columns are
   * fetched last, by primary key in the same snapshot, for the rows returned (carried through the claim,
   * a sort and the window functions, they were copied several times). The ids left out go as a hashed
   * subquery, not `id <> all(...)`: PostgreSQL plans that one element at a time, at every read. Together,
   * 1.3–2.3 µs less PostgreSQL CPU per relayed row (docs/performance.md).
   */
  private async deleteAndRead(session: RelaySession, inFlight: string[]): Promise<Batch> {
    const table = qualified(this.options.outboxTable);
    const { batchSize, maxBatchBytes } = this.options.relay;
    const prefix = this.eventrail.prefix;
    const deleting = this.appended;
    this.appended = [];
    const rowReadBytes = this.rowReadBytes();
    // Placeholders are numbered in the order the template below evaluates them, each used once.
    const values: unknown[] = [];
    const $ = (value: unknown): string => {
      values.push(value);
      return `$${values.length}`;
    };
    // Unmarked refused rows hold their keys from here: the lowest such id of each key.
    const unmarked = new Map<string, string>();
    for (const [id, key] of this.unmarked) {
      const lowest = key === null ? undefined : unmarked.get(key);
      if (key !== null && (lowest === undefined || BigInt(id) < BigInt(lowest))) unmarked.set(key, id);
    }
    const failedOfLog = (alias: string): string =>
      `${alias}.failed is not null and (${alias}.log = ${$(prefix)} or (${alias}.log is null and (select owns from o)))`;
    const sql = `with ${deleting.length > 0 ? `gone as (delete from ${table} where id = any(${$(idList(deleting))}::bigint[])),` : ''}
      o as (select ${ownsUnlabelledSql(this.options.outboxTable, $(prefix))} as owns),
      c as (
        select id, log,
          octet_length(data)::bigint + coalesce(octet_length(headers), 0) + octet_length(event) + octet_length(event_id)
            + coalesce(octet_length(key), 0) as bytes
        from ${table} r
        where failed is null and id not in (select unnest(${$(idList([...deleting, ...inFlight, ...this.deleting, ...this.unmarked.keys()]))}::bigint[]))
          and (log = ${$(prefix)} or (log is null and (select owns from o)))
          and (key is null
            or (select f.key from ${table} f where f.key is not null and ${failedOfLog('f')} order by f.key, f.id limit 1) is null
            or not exists (select 1 from ${table} f where f.key = r.key and f.id < r.id and ${failedOfLog('f')}))
          ${
            unmarked.size === 0
              ? ''
              : `and coalesce(id <= (${$([...unmarked.values()])}::bigint[])[array_position(${$([...unmarked.keys()])}::text[], key)], true)`
          }
        order by id limit ${$(batchSize)}),
      claimed as (
        update ${table} u set log = ${$(prefix)} from c where u.id = c.id and c.log is null and u.log is null returning u.id),
      w as (
        select id, bytes, bytes > ${$(rowReadBytes)} as unread, row_number() over (order by id) as n, count(*) over () as candidates,
          sum(case when bytes > ${$(rowReadBytes)} then 0 else bytes end) over (order by id) as running
        from c where c.log is not null or c.id in (select id from claimed))
      select w.id, t.partition, w.bytes, w.unread, w.candidates,
        case when w.unread then left(t.event_id, ${$(UNREAD_EVENT_ID_CHARS)}) else t.event_id end as event_id,
        case when w.unread then null else t.event end as event,
        case when w.unread and octet_length(t.key) > ${$(UNREAD_KEY_BYTES)} then null else t.key end as key,
        case when w.unread then null else t.data end as data, case when w.unread then null else t.headers end as headers
      from w cross join lateral (select partition, event_id, event, key, data, headers from ${table} x where x.id = w.id) t
      where w.n = 1 or w.running <= ${$(maxBatchBytes)}
      order by w.id`;
    // A NOTIFY from here on may be for a row this read does not see: it makes the batch `more`.
    this.notified = false;
    try {
      const rows = await session.query(sql, values);
      return { rows, full: rows.length === batchSize || Number(rows[0]?.candidates ?? 0) > rows.length };
    } catch (error) {
      this.appended = [...deleting, ...this.appended];
      throw error;
    }
  }

  /** The most the relay reads of one row: a row over it is failed unread. */
  private rowReadBytes(): number {
    return Math.min(Math.max(this.options.relay.maxBatchBytes, this.eventrail.maxPayloadBytes), MAX_ROW_READ_BYTES);
  }

  /**
   * Rows without a log go to the log the `log` column's default names: with none, no relay takes them.
   * Said once when the relay becomes active, so they do not wait unseen.
   */
  private async warnUnowned(session: RelaySession): Promise<void> {
    const { outboxTable } = this.options;
    const [row] = await session.query(
      `select ${logDefaultSql(outboxTable)} as owner, exists (select 1 from ${qualified(outboxTable)} where log is null) as unlabelled`,
    );
    if (row?.unlabelled === true && (row.owner === null || row.owner === undefined)) {
      this.logger.warn(
        `Outbox ${outboxTable} has rows without a log, and no log owns them (its log column has no default): no relay appends them. To make them log "${this.eventrail.prefix}"'s: alter table ${outboxTable} alter column log set default '${this.eventrail.prefix}'`,
      );
    }
  }

  /** A keyed row after a failed row of its key: it waits until that row is fixed or deleted. */
  private isHeld(row: Row): boolean {
    const failedId = row.key === null || row.key === undefined ? undefined : this.held.get(row.key as string);
    return failedId !== undefined && BigInt(row.id as string) > failedId;
  }

  /**
   * Deletes the appended rows through the connector (a pooled connection): a delete needs no lock, since
   * it only removes rows Redis acknowledged. A failure puts them back for the next read's delete.
   */
  private deleteInBackground(): void {
    const ids = this.appended;
    this.appended = [];
    for (const id of ids) this.deleting.add(id);
    const done = this.options.connector
      .query(`delete from ${qualified(this.options.outboxTable)} where id = any($1::bigint[])`, [idList(ids)])
      .then(
        () => undefined,
        (error: unknown) => {
          this.appended.push(...ids);
          this.logger.debug(
            `Outbox relay: deleting ${ids.length} appended row(s) failed (${describeError(error)}); retried with the next read`,
          );
        },
      )
      .finally(() => {
        for (const id of ids) this.deleting.delete(id);
        this.backgroundDeletes.delete(done);
      });
    this.backgroundDeletes.add(done);
  }

  private async deleteAppended(session: RelaySession): Promise<void> {
    const deleting = this.appended;
    this.appended = [];
    try {
      await session.query(`delete from ${qualified(this.options.outboxTable)} where id = any($1::bigint[])`, [idList(deleting)]);
    } catch (error) {
      this.appended = [...deleting, ...this.appended];
      throw error;
    }
  }

  /** Finds the rows of a refused batch that the publisher refuses, and sets their `failed` so the rest can go on. */
  private async markFailed(session: RelaySession, rows: Row[], inputs: PublishInput[]): Promise<number> {
    let failed = 0;
    for (let i = 0; i < rows.length; i++) {
      // A key's rows after its first refused one are held (the re-read leaves them out), not judged.
      if (this.isHeld(rows[i])) continue;
      const { event, data, ...options } = inputs[i];
      try {
        // Rows hold event names: the relay builds its inputs from them. Judged on the stored text, as appended.
        this.publisher.checkStored(event as string, data, rows[i].data as string, options);
      } catch (error) {
        await this.fail(session, rows[i], describeError(error));
        failed++;
      }
    }
    return failed;
  }

  private async fail(session: RelaySession, row: Row, reason: string): Promise<void> {
    const { outboxTable } = this.options;
    const id = String(row.id);
    const key = row.key as string | null;
    const held =
      key === null
        ? ''
        : `; the later rows of key ${JSON.stringify(key)} wait behind it until it is fixed (update ${outboxTable} set data = '...', failed = null where id = ${id}) or deleted (delete from ${outboxTable} where id = ${id})`;
    const judgedBefore = this.unmarkedReported.has(id);
    if (!judgedBefore)
      this.logger.error(`Outbox row ${id} (event ${String(row.event_id)}) of ${outboxTable} cannot be appended: ${reason}${held}`);
    try {
      await session.query(`update ${qualified(outboxTable)} set failed = $1 where id = $2`, [reason, id]);
      this.unmarkedReported.delete(id);
    } catch (error) {
      // The mark would put the key in the failed-rows index, and the key is too long for it: hold the row
      // here instead, so one row cannot end every session that meets it. (An unread row's key over what
      // the publisher takes comes back null: no published row shares it, so nothing is held behind it.)
      if ((error as { code?: unknown }).code !== PROGRAM_LIMIT_EXCEEDED) throw error;
      this.unmarked.set(id, key);
      if (!judgedBefore) {
        this.logger.error(
          `Outbox row ${id} of ${outboxTable} cannot be marked failed (${describeError(error)}): it stays unmarked and is held by the active relay, judged again every relay.pollIntervalMs; fix it (update ${outboxTable} set data = '...' where id = ${id}) or delete it`,
        );
      }
      this.unmarkedReported.add(id);
    }
    if (key !== null) {
      const earlier = this.held.get(key);
      if (earlier === undefined || BigInt(id) < earlier) this.held.set(key, BigInt(id));
    }
    if (!judgedBefore) this.counters.failedRows++;
  }

  /** Depth and age for `metrics.onOutboxStatus`, at most every `relay.pollIntervalMs` and only when the hook is set. */
  private async sample(session: RelaySession): Promise<void> {
    if (typeof this.eventrail.metrics.onOutboxStatus !== 'function' || Date.now() - this.lastSample < this.options.relay.pollIntervalMs)
      return;
    this.lastSample = Date.now();
    const status = await readOutboxStatus((sql, params) => session.query(sql, params), this.options.outboxTable, this.eventrail.prefix);
    this.metrics.emit('onOutboxStatus', status.table, status.depth, status.oldestAgeMs ?? 0);
  }

  private poke(): void {
    this.notified = true;
    this.wake?.('notify');
  }

  /** Waits `ms`, or less: until stopped or the session fails, or (with `onNotify`) until a NOTIFY arrives. */
  private pause(ms: number, onNotify: boolean): Promise<void> {
    if (this.stopping || this.lost || (onNotify && this.notified)) return Promise.resolve();
    return new Promise<void>((resolve) => {
      const finish = (): void => {
        clearTimeout(timer);
        resolve();
      };
      const timer = setTimeout(finish, ms);
      this.wake = (reason) => {
        if (reason === 'stop' || onNotify) finish();
      };
    }).finally(() => (this.wake = undefined));
  }

  private async closeSession(): Promise<void> {
    const session = this.session;
    this.session = undefined;
    if (session) await session.close().catch(() => undefined);
  }
}

/**
 * Row ids (bigint columns, read as their decimal text) as one array literal: the driver sends it as it is,
 * where an array of them would be quoted and escaped element by element (about 1.2 µs a row in the relay's
 * profile, for ids that need neither).
 */
function idList(ids: readonly string[]): string {
  return `{${ids.join(',')}}`;
}

function toPublishInput(row: Row): PublishInput {
  return {
    event: row.event as string,
    data: JSON.parse(row.data as string) as unknown,
    id: row.event_id as string,
    key: (row.key as string | null) ?? undefined,
    partition: row.partition === null || row.partition === undefined ? undefined : Number(row.partition),
    headers: row.headers ? (JSON.parse(row.headers as string) as Record<string, string>) : undefined,
  };
}
