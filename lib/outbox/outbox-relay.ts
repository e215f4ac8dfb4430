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
import type { ResolvedOutboxOptions } from './outbox.options';
import { notifyChannel, qualified, RELAY_LOCK_NAMESPACE } from './outbox-schema';
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

/** Bound on how long shutdown waits for the batch in hand before it closes the session anyway. */
const STOP_TIMEOUT_MS = 10_000;

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
  private prefetched?: Promise<Row[]>;

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
    const session = await connector.session();
    this.session = session;
    session.onLost((error) => {
      this.lost = error;
      this.wake?.('stop');
    });
    // A standby whose process died leaves its backend waiting for the lock unless the server checks the socket (PostgreSQL 14+).
    await session.query(`set client_connection_check_interval = 1000`).catch(() => undefined);
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
    let redisFailures = 0;
    while (!this.stopping) {
      if (this.lost) throw this.lost;
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
    await (this.prefetched as Promise<Row[]> | undefined)?.catch(() => undefined); // set by relayBatch
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
    const { outboxTable, relay } = this.options;
    const prefetched = this.prefetched;
    this.prefetched = undefined;
    const rows = await (prefetched ?? this.deleteAndRead(session, []));
    if (rows.length === 0) return this.notified ? 'more' : 'drained';
    const kept: Row[] = [];
    const inputs: PublishInput[] = [];
    for (const row of rows) {
      try {
        inputs.push(toPublishInput(row));
        kept.push(row);
      } catch (error) {
        await this.fail(session, row, `its data or headers are not JSON (${describeError(error)})`);
      }
    }
    if (inputs.length === 0) return 'more';
    let results;
    const appending = this.publisher.publishMany(inputs);
    // A full batch: read the next one meanwhile (PostgreSQL and Redis work at once). Rows of the same key
    // as one in this batch have higher ids (the key lock), so the next batch never overtakes this one.
    if (rows.length === relay.batchSize) {
      this.prefetched = this.deleteAndRead(
        session,
        rows.map((row) => String(row.id)),
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
    const more = rows.length === relay.batchSize || this.notified || this.prefetched !== undefined;
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
   */
  private async deleteAndRead(session: RelaySession, inFlight: string[]): Promise<Row[]> {
    const table = qualified(this.options.outboxTable);
    const columns = 'id, event_id, event, key, partition, data, headers';
    const limit = this.options.relay.batchSize;
    const log = this.eventrail.prefix;
    // This log's rows (and rows from before logs were recorded) that are not failed. Placeholders in order: `n` is the first.
    const mine = (n: number): string => `failed is null and id <> all($${n}::bigint[]) and (log = $${n + 1} or log is null)`;
    const deleting = this.appended;
    this.appended = [];
    // A NOTIFY from here on may be for a row this read does not see: it makes the batch `more`.
    this.notified = false;
    try {
      if (deleting.length === 0) {
        return await session.query(`select ${columns} from ${table} where ${mine(1)} order by id limit $3`, [
          [...inFlight, ...this.deleting],
          log,
          limit,
        ]);
      }
      return await session.query(
        `with gone as (delete from ${table} where id = any($1::bigint[]))
         select ${columns} from ${table} where ${mine(2)} order by id limit $4`,
        [deleting, [...deleting, ...inFlight, ...this.deleting], log, limit],
      );
    } catch (error) {
      this.appended = [...deleting, ...this.appended];
      throw error;
    }
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
      .query(`delete from ${qualified(this.options.outboxTable)} where id = any($1::bigint[])`, [ids])
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
      await session.query(`delete from ${qualified(this.options.outboxTable)} where id = any($1::bigint[])`, [deleting]);
    } catch (error) {
      this.appended = [...deleting, ...this.appended];
      throw error;
    }
  }

  /** Finds the rows of a refused batch that the publisher refuses, and sets their `failed` so the rest can go on. */
  private async markFailed(session: RelaySession, rows: Row[], inputs: PublishInput[]): Promise<number> {
    let failed = 0;
    for (let i = 0; i < rows.length; i++) {
      const { event, data, ...options } = inputs[i];
      try {
        // Rows hold event names: the relay builds its inputs from them.
        this.publisher.check(event as string, data, options);
      } catch (error) {
        await this.fail(session, rows[i], describeError(error));
        failed++;
      }
    }
    return failed;
  }

  private async fail(session: RelaySession, row: Row, reason: string): Promise<void> {
    const { outboxTable } = this.options;
    this.logger.error(`Outbox row ${String(row.id)} (event ${String(row.event_id)}) of ${outboxTable} cannot be appended: ${reason}`);
    await session.query(`update ${qualified(outboxTable)} set failed = $1 where id = $2`, [reason, String(row.id)]);
    this.counters.failedRows++;
  }

  /** Depth and age for `metrics.onOutboxStatus`, at most every `relay.pollIntervalMs` and only when the hook is set. */
  private async sample(session: RelaySession): Promise<void> {
    if (typeof this.eventrail.metrics.onOutboxStatus !== 'function' || Date.now() - this.lastSample < this.options.relay.pollIntervalMs)
      return;
    this.lastSample = Date.now();
    const status = await readOutboxStatus((sql, params) => session.query(sql, params), this.options.outboxTable);
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
