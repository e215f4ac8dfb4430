import { randomBytes } from 'node:crypto';
import { Inject, Injectable } from '@nestjs/common';
import { EVENTRAIL_OPTIONS } from '../config/eventrail.constants';
import type { Durability } from '../redis/connection.options';
import type { PublisherView } from './publisher.options';
import { EventrailError } from '../errors/eventrail.error';
import { InvalidEventDataError } from '../errors/invalid-event-data.error';
import { InvalidHeadersError } from '../errors/invalid-headers.error';
import { describeError } from '../util/describe-error';
import { ReplicationTimeoutError } from '../errors/replication-timeout.error';
import { InvalidPublishOptionsError } from '../errors/invalid-publish-options.error';
import { PayloadTooLargeError } from '../errors/payload-too-large.error';
import { RedisUnavailableError } from '../errors/redis-unavailable.error';
import { PublishManyError, type PublishOutcome } from '../errors/publish-many.error';
import { PublishTimeoutError } from '../errors/publish-timeout.error';
import { RedisFullError } from '../errors/redis-full.error';
import { EventrailRedis } from '../redis/eventrail-redis';
import type {
  AppendManyDedupInput,
  AppendManyDedupReply,
  AppendManyReply,
  PackedEvents,
  AppendTransaction,
  RunGuard,
  TransactionOutcome,
} from '../redis/eventrail-scripts';
import { encodeFields } from '../wire/codec';
import { derivedEventId } from '../wire/event-id';
import { partitionForKey } from '../wire/partitioner';
import { jsonBytesBound, validateEventName, validateHeaders } from '../events/validate-event';
import type { EventDefinition, EventInput, EventRef } from '../events/event-definition';
import { publishedEventName, publishedEventNames } from '../events/published-event';
import { AppendCoalescer, AppendReply } from './append-coalescer';
import { AppendRefused, outcomeOf } from './append-outcome';
import { CallOrder, orderLane } from './call-order';
import { withDeadline } from './publish-deadline';
import { corkedWrite } from '../redis/corked-write';
import { isBigEntry } from '../redis/big-entries';
import { isRefusal } from '../redis/server-probe';
import { startPublishManySpan, startPublishSpan } from '../tracing/publish-tracing';

export interface PublishOptions {
  /** Ordering key: events with the same key go to the same partition and are handled in publish order. */
  key?: string;
  /** Headers such as `traceparent`; string values only. */
  headers?: Record<string, string>;
  /**
   * Event id to use instead of the one derived from the entry's position (for
   * example an outbox row id). Written with the publish time, so the event
   * keeps it wherever it travels.
   */
  id?: string;
  /** Partition of a keyless event. @default 0 */
  partition?: number;
  /** Overrides the module's `durability` for this call. */
  durability?: Durability;
}

export interface PublishInput<T = unknown> extends PublishOptions {
  /** The event's name, or its `defineEvent` definition (whose schema then checks `data`). */
  event: EventRef;
  data: T;
}

export interface PublishResult {
  /** Event id. */
  id: string;
  partition: number;
  /** Stream id of the entry: its position in the partition. */
  offset: string;
  /**
   * True when producer dedup (`dedupWindowMs`) found this event id already
   * appended within the window: nothing was appended, `offset` is the first append's.
   */
  duplicate?: boolean;
}

/** What `publish` takes as the data of `E`: its schema's input for a definition, anything for a name. */
export type PublishedData<E extends EventRef> = E extends EventDefinition ? EventInput<E> : unknown;

/** One `publishMany` input as the compiler checks it: a definition's data must be its schema's input. */
export type CheckedInput<I> = I extends { event: infer D extends EventDefinition } ? Omit<I, 'data'> & { data: EventInput<D> } : I;

const MAX_ID_LENGTH = 200;
/** Most events in one appendMany call of coalesced `publish` calls. */
const RUN_EVENTS = 1000;
/**
 * Most events in one appendMany call of a `publishMany`. Each such run is
 * written as soon as it is built, so Redis appends the first runs while the
 * later ones are built and the first replies are read: `publishMany` of 1000
 * events to one partition went from about 100 000 to 125 000-145 000 events/s
 * with runs of 100-250 instead of one run of 1000
 * (bench/tools/prof-publish-many.ts; docs/performance.md). Not for coalesced
 * `publish` calls: a thousand callers answered in eight parts came back in
 * smaller batches (the publish-callers ratio was 0.93-0.94 against 0.98-1.04,
 * two runs each).
 */
const STREAMED_RUN_EVENTS = 128;
/** About the most field characters in one appendMany call (a call is one command: Redis buffers it whole). */
const RUN_BYTES = 4 * 1024 * 1024;

/**
 * Most events of a `publishMany` sent as one transaction (`sendTransaction`);
 * a larger call goes as guarded runs, so that Redis never holds more than
 * this many queued commands of one call, nor runs them in one step.
 */
const TRANSACTION_EVENTS = 1000;
/** Thrown while a transaction is built: it cannot go as one (a big entry, over `RUN_BYTES`), runs go instead. */
const SEND_AS_RUNS = Symbol('send as runs');
const MAX_KEY_LENGTH = 1024;
/**
 * How long the run guard of a `publishMany` may outlive it (ms): it is
 * deleted by the partition's last run, and left only when the connection
 * drops between two runs. A guard that expired before a later run of its
 * call arrived holds that run back (reported not appended): never a gap.
 */
const RUN_GUARD_TTL_MS = 300_000;

/** One run of `buildRuns`: consecutive events of one partition, sent as one command. */
interface Run {
  partition: number;
  /** The events' indexes in the call. */
  indexes: number[];
  /** Its events carry ids and go through producer dedup. */
  deduped: boolean;
  ids: string[];
  /** Its events as `PackedEvents`, or, when `width` is above 0, their field values alone. */
  events: PackedEvents;
  /** The field count of every event of a run without dedup; 0 when their counts differ, or with dedup. */
  width: number;
  /** Set when the partition takes more than one run in the call. */
  guard?: RunGuard;
}

/** Runs sent behind a transaction that took a call's first events (`commitThenRuns`). */
interface RunsAfter {
  /** The first event not in the transaction. */
  from: number;
  /** The call id of the guards the transaction set. */
  call: string;
  /** The partitions whose guard the transaction set: their runs start at `runsBefore` 1. */
  guarded: ReadonlySet<number>;
}

interface Prepared {
  /** The event's name, for errors. */
  event: string;
  partition: number;
  /** The caller's id; without one, the id is derived from the stream id Redis gives the entry. */
  id: string | undefined;
  /** The XADD field arguments; null while the data waits to be serialised (`unwritten`). */
  fields: string[] | null;
  /** What a `publishMany` event's fields are made of when its data is serialised as its run is sent (see `publishChecked`). */
  unwritten: Unwritten | undefined;
  /** Appended through the dedup script: the caller chose the id and dedup is on. */
  dedup: boolean;
}

/** An event checked but not serialised yet: its data, and the other fields as they will be written. */
interface Unwritten {
  data: unknown;
  key: string | undefined;
  time: number | undefined;
  headers: string | undefined;
}

/**
 * Appends events to the log. Everything is validated before anything is sent,
 * so a refused call appends nothing (`publishMany` serialises data as its runs
 * leave: only data whose getter answers differently when read again can be
 * refused after a run left, and `PublishManyError` then says which were appended).
 */
@Injectable()
export class EventrailPublisher {
  /** Concurrent `publish` calls leave together, one pipeline per tick. */
  private readonly appends: AppendCoalescer<Prepared, PublishResult>;
  /** Whether the appendMany script runs here, once known (see `appendManyWorks`). */
  private appendManyOk?: boolean;
  private appendManyAsked?: Promise<void>;
  /** Holds calls behind earlier ones of the same key (or keyless partition) still waiting for an asynchronous schema. */
  private readonly order = new CallOrder();

  constructor(
    private readonly redis: EventrailRedis,
    @Inject(EVENTRAIL_OPTIONS) private readonly options: PublisherView,
  ) {
    const timeoutMs = this.options.publishTimeoutMs;
    this.appends = new AppendCoalescer<Prepared, PublishResult>(
      (p) => this.redis.scripts.append(p.partition, p.fields as string[]),
      async (batch) => (await this.append(batch, false, false)).replies,
      (write) => corkedWrite(this.redis.client, write),
      // Queued appends leave on the next tick at the latest: by the deadline, each one was written.
      { ms: timeoutMs, timedOut: () => new PublishTimeoutError(timeoutMs, 1, true) },
      {
        answer: (p, offset) => ({
          id: p.id ?? this.derivedId(p.partition, offset as string),
          partition: p.partition,
          offset: offset as string,
        }),
        failure: (p, error) => (error instanceof PublishTimeoutError ? error : publishFailed(p.event, error)),
      },
      (batch) => this.appendTogether(batch),
    );
  }

  /**
   * Appends one event. Resolves once Redis has appended it (and, with
   * `durability: 'replicated'`, once the replicas confirmed it).
   */
  publish<T>(event: string, data: T, options?: PublishOptions): Promise<PublishResult>;
  /** A `defineEvent` definition: `data` is typed by its schema's input and checked by the schema before anything is sent. */
  publish<E extends EventRef>(event: E, data: PublishedData<E>, options?: PublishOptions): Promise<PublishResult>;
  publish(definitionOrName: EventRef, data: unknown, options: PublishOptions = {}): Promise<PublishResult> {
    // Not an async function: the common call costs the append's promise and no frame of its own. Whatever
    // throws here still reaches the caller as a rejection, never as a synchronous throw.
    try {
      // A definition's schema checks the data first (awaited only when the schema is asynchronous).
      const named = publishedEventName(definitionOrName, data);
      const lane = orderLane(options);
      if (typeof named === 'string' && !this.order.waitingOnLane(lane)) return this.publishNamed(named, data, options);
      // Its place in its key's append order is taken now, in call order, whenever its check answers.
      return this.order.hold(lane === undefined ? [] : [lane], named, (event) => this.publishNamed(event, data, options));
    } catch (error) {
      return Promise.reject(error);
    }
  }

  private publishNamed(event: string, data: unknown, options: PublishOptions): Promise<PublishResult> {
    // OpenTelemetry (when installed): a PRODUCER span, its trace context in the headers.
    const span = startPublishSpan(this.options, event, options);
    if (!span) return this.publishOne(event, data, options);
    let appended: Promise<PublishResult>;
    try {
      appended = this.publishOne(event, data, span.input);
    } catch (error) {
      appended = Promise.reject(error);
    }
    return span.track(appended); // ends the span with the outcome, refusals included
  }

  /** Throws on bad input (the caller turns that into a rejection). */
  private publishOne(event: string, data: unknown, options: PublishOptions): Promise<PublishResult> {
    const prepared = this.prepare(event, data, options, Date.now());
    const replicated = this.replicated(event, options.durability);
    this.assertReady();
    if (replicated || prepared.dedup) return this.send([prepared], replicated).then((results) => results[0]);
    // Bounded by `publishTimeoutMs` (the coalescer's deadline), answered as the coalescer's `answers` say.
    return this.appends.add(prepared);
  }

  /**
   * Appends many events in one write. Order is kept per partition. Up to
   * 1000 events without their own `id`, on a single server, go as one
   * transaction: all of them land or none. Otherwise (more events, ids with
   * producer dedup, big entries, Redis Cluster) they go as runs and the call
   * is not atomic: if Redis fails midway, the call rejects with
   * `PublishManyError`, whose `outcomes` say which were appended (per
   * partition, the first ones sent).
   */
  publishMany<const E extends ReadonlyArray<PublishInput>>(
    events: E & { readonly [I in keyof E]: CheckedInput<E[I]> },
    options?: { durability?: Durability },
  ): Promise<PublishResult[]>;
  async publishMany(events: ReadonlyArray<PublishInput>, options: { durability?: Durability } = {}): Promise<PublishResult[]> {
    const span = startPublishManySpan(this.options, events);
    if (span) return span.track(this.publishBatch(span.input, options));
    return this.publishBatch(events, options);
  }

  /**
   * The outbox relay's `publishMany`, not for apps: event `i`'s data is appended as `stored[i]`, JSON
   * text the caller parsed into `events[i].data` (a row's data as it was stored): the parsed data is
   * walked as `publishMany` walks it, the text is what is measured against `maxPayloadBytes` and
   * appended, and nothing is serialised again. Everything else (schema checks, options) as `publishMany`.
   * @internal
   */
  publishStored(events: ReadonlyArray<PublishInput>, stored: readonly string[]): Promise<PublishResult[]> {
    if (stored.length !== events.length) return Promise.reject(new Error(`${stored.length} data texts for ${events.length} events`));
    const span = startPublishManySpan(this.options, events);
    if (span) return span.track(this.publishBatch(span.input, {}, stored));
    return this.publishBatch(events, {}, stored);
  }

  private async publishBatch(
    events: ReadonlyArray<PublishInput>,
    options: { durability?: Durability },
    stored?: readonly string[],
  ): Promise<PublishResult[]> {
    if (!Array.isArray(events)) throw new InvalidPublishOptionsError('(batch)', 'events', 'must be an array');
    // Every definition's schema checks its data before anything is prepared or sent.
    const named = publishedEventNames(events);
    const lanes: string[] = [];
    for (const input of events) {
      const lane = orderLane(input);
      if (lane !== undefined) lanes.push(lane);
    }
    const asking = events.length > 1 ? this.scriptsAsked(events.length) : undefined;
    if (Array.isArray(named) && !asking && !this.order.waitingOn(lanes)) return this.publishChecked(events, named, options, stored);
    // Its place in the append order of each key it publishes to is taken now, in call order, whenever its checks answer.
    const checked = asking ? Promise.all([named, asking]).then(([names]) => names) : named;
    return this.order.hold(lanes, checked, (names) => this.publishChecked(events, names, options, stored));
  }

  /**
   * While this process does not know yet whether the append scripts run
   * here (its first `publishMany`), the question, asked now; else undefined.
   * A batch waits for the answer like an asynchronous schema check, in its
   * keys' call order, so that it goes as guarded runs rather than one XADD
   * per event, which could land a later event of a partition after a refused
   * one: one round trip, once per process. Not while the connection is down
   * (the batch is refused at once then, as any publish). A question not
   * answered within `publishTimeoutMs` (a connection that drops packets)
   * refuses the batch of `count` events, of which nothing was sent.
   */
  private scriptsAsked(count: number): Promise<void> | undefined {
    if (this.appendManyOk !== undefined || !this.redis.isReady()) return undefined;
    this.appendManyWorks();
    const asked = this.appendManyAsked;
    if (!asked) return undefined;
    const timeoutMs = this.options.publishTimeoutMs;
    return withDeadline(asked, timeoutMs, () => {
      const cause = new PublishTimeoutError(timeoutMs, count, false);
      throw new PublishManyError(new Array<PublishOutcome>(count).fill('not-appended'), new Array(count), cause);
    });
  }

  private async publishChecked(
    events: ReadonlyArray<PublishInput>,
    names: string[],
    options: { durability?: Durability },
    stored?: readonly string[],
  ): Promise<PublishResult[]> {
    const now = Date.now();
    // Sent as runs on one connection (the usual publishMany): each event's data is serialised as its run is
    // built, while Redis appends the runs before it, rather than all of it before the first run leaves.
    const unwritten = events.length > 1 && !this.redis.isCluster && this.appendManyOk === true;
    const prepared = events.map((input, i) => this.prepare(names[i], input?.data, input ?? {}, now, unwritten, stored?.[i]));
    const replicated = this.replicated('(batch)', options?.durability ?? mostDurable(events));
    if (prepared.length === 0) return [];
    this.assertReady();
    return this.send(prepared, replicated, true);
  }

  /**
   * Checks one event exactly as `publish` does and sends nothing (the outbox's check before it stores a
   * row, so a refused event never waits in a table). Returns the partition it would be appended to.
   */
  check(event: string, data: unknown, options: PublishOptions = {}): { partition: number } {
    return { partition: this.prepare(event, data, options, Date.now()).partition };
  }

  /**
   * `check` of an event `publishStored` would append with `stored` as its data's JSON: the outbox relay's
   * judgement of a row its append refused, made on the text that append measured.
   * @internal
   */
  checkStored(event: string, data: unknown, stored: string, options: PublishOptions = {}): void {
    this.prepare(event, data, options, Date.now(), false, stored);
  }

  /** Appends `prepared` (a `publish` that cannot be coalesced, or a `publishMany`: `many`) and answers one result per event. */
  private async send(prepared: Prepared[], replicated: boolean, many = false): Promise<PublishResult[]> {
    // Appends queued by earlier `publish` calls go first: a later call must not overtake them.
    this.appends.flush();
    let sent: { replies: AppendReply[]; confirmed: number };
    try {
      sent = await this.append(prepared, replicated, true);
    } catch (error) {
      if (many) throw new PublishManyError(new Array<PublishOutcome>(prepared.length).fill('unknown'), new Array(prepared.length), error);
      throw new RedisUnavailableError(
        `publish of ${prepared.length} event(s) failed after it was sent: they may or may not have been appended`,
        error,
      );
    }
    const results: PublishResult[] = new Array(prepared.length);
    let failed: Error | undefined;
    let appended = 0;
    for (let i = 0; i < prepared.length; i++) {
      const [error, reply] = sent.replies[i] ?? [new Error('no reply'), null];
      if (error) {
        // The cause is the first refusal itself, not a later run the guard held back because of it.
        if (!failed || (failed instanceof AppendRefused && failed.heldBack && !(error instanceof AppendRefused && error.heldBack)))
          failed = error;
        continue;
      }
      appended++;
      const { id, partition, dedup } = prepared[i];
      if (dedup && Array.isArray(reply))
        results[i] = { id: id as string, partition, offset: reply[0] as string, duplicate: reply[1] === 1 };
      else results[i] = { id: id ?? this.derivedId(partition, reply as string), partition, offset: reply as string };
    }
    if (failed && many) {
      const outcomes = prepared.map((_, i): PublishOutcome => {
        const error = sent.replies[i]?.[0];
        return error ? outcomeOf(error) : 'appended';
      });
      const first = prepared[sent.replies.findIndex((reply) => reply?.[0] === failed)];
      throw new PublishManyError(outcomes, results, outOfMemory(first?.event ?? '(batch)', failed) ?? failed);
    }
    if (failed instanceof PublishTimeoutError) throw failed;
    if (failed) {
      const full = prepared.length === 1 ? outOfMemory(prepared[0].event, failed) : undefined;
      if (full) throw full;
      throw new RedisUnavailableError(`${prepared.length - appended} of ${prepared.length} event(s) were not appended`, failed);
    }
    const { replicas, timeoutMs } = this.options.replication;
    if (replicated && sent.confirmed < replicas) throw new ReplicationTimeoutError(sent.confirmed, replicas, timeoutMs, results);
    return results;
  }

  /**
   * Sends the appends as one pipeline, which keeps their order, followed by a
   * `WAIT` on the same connection when they must be replicated. On a cluster
   * a pipeline may only touch one slot, so there it is one pipeline (and one
   * `WAIT`, on that partition's primary) per partition, sent together; order
   * within a partition is what is promised. `confirmed` is the fewest replicas
   * any `WAIT` reported. `streamed` (a `publishMany`): see `sendRuns`.
   */
  private async append(
    prepared: Prepared[],
    replicated: boolean,
    streamed: boolean,
  ): Promise<{ replies: AppendReply[]; confirmed: number }> {
    if (!this.redis.isCluster) return this.appendBatch(prepared, replicated, streamed);
    const byPartition = new Map<number, number[]>();
    prepared.forEach((p, i) => {
      const indexes = byPartition.get(p.partition);
      if (indexes) indexes.push(i);
      else byPartition.set(p.partition, [i]);
    });
    const replies: AppendReply[] = new Array(prepared.length);
    let confirmed = Infinity;
    await Promise.all(
      [...byPartition.values()].map(async (indexes) => {
        const part = await this.appendBatch(
          indexes.map((i) => prepared[i]),
          replicated,
          streamed,
        );
        indexes.forEach((index, j) => (replies[index] = part.replies[j] ?? [new Error('no reply'), null]));
        confirmed = Math.min(confirmed, part.confirmed);
      }),
    );
    return { replies, confirmed };
  }

  private async appendBatch(
    prepared: Prepared[],
    replicated: boolean,
    streamed: boolean,
  ): Promise<{ replies: AppendReply[]; confirmed: number }> {
    const { client } = this.redis;
    const { replicas, timeoutMs } = this.options.replication;
    // Nothing is awaited before the commands are written, so a call made right after this one cannot overtake it.
    const scripted = prepared.length > 1 && !this.redis.isCluster && this.appendManyWorks();
    // A publishMany of events without producer dedup: one transaction, where it can go as one (see `sendTransaction`).
    const transaction = scripted && streamed && prepared.length <= TRANSACTION_EVENTS && !prepared.some((p) => p.dedup);
    // Only runs streamed to one connection serialise data as they go; every other way, all of it before anything is sent.
    if (!scripted || !streamed) this.writeAll(prepared);
    // One connection: the commands sent with the socket corked leave as one write, in order (cheaper than a pipeline).
    const replies: AppendReply[] = new Array(prepared.length);
    const sent: Array<Promise<void>> = [];
    let waited: Promise<unknown> | undefined;
    const corked = corkedWrite(client, (sendNow) => {
      if (transaction && this.sendTransaction(prepared, replies, sent, sendNow)) {
        // sent as one transaction
      } else if (scripted) this.sendRuns(prepared, replies, sent, streamed ? sendNow : undefined);
      else for (let i = 0; i < prepared.length; i++) sent.push(this.settleInto(replies, i, this.appendOne(prepared[i])));
      if (replicated) waited = this.redis.scripts.waitForReplicas(replicas, timeoutMs);
    });
    const deadlineMs = this.deadlineMs(replicated);
    if (corked) {
      const answered = Promise.all(sent).then(() => (waited ? waited.then(Number, () => 0) : Infinity));
      // Past the deadline, what has no answer yet is reported unknown; replicas that did not confirm, as none.
      const confirmed = await withDeadline(answered, deadlineMs, () => {
        const timedOut = new PublishTimeoutError(deadlineMs, prepared.length, true);
        for (let i = 0; i < replies.length; i++) replies[i] ??= [timedOut, null];
        return 0;
      });
      return { replies, confirmed };
    }
    // A Cluster: one partition's events (`append` splits them), as one pipeline to its node.
    const pipeline = client.pipeline();
    // Where scripts are refused, big entries go as plain XADDs: their partition is marked as not indexed first.
    const unindexed = this.redis.scripts.appendsUnindexed && prepared.some((p) => isBigEntry(this.fieldsOf(p)));
    if (unindexed) this.redis.scripts.queueUnindexed(pipeline, prepared[0].partition);
    const queueOne = (p: Prepared): void => {
      if (p.dedup && p.id !== undefined)
        this.redis.scripts.queuePublishDedup(pipeline, {
          partition: p.partition,
          id: p.id,
          windowMs: this.options.dedupWindowMs,
          fields: this.fieldsOf(p),
        });
      else this.redis.scripts.queueAppend(pipeline, p.partition, this.fieldsOf(p));
    };
    // A publishMany goes as runs here too, so what lands is a prefix (see `buildRuns`); each queued command is one run.
    const runs: Run[] = [];
    if (streamed && prepared.length > 1 && this.appendManyWorks()) {
      this.buildRuns(prepared, STREAMED_RUN_EVENTS, undefined, (run) => {
        runs.push(run);
        if (run.indexes.length === 1 && !run.guard) queueOne(prepared[run.indexes[0]]);
        else if (run.deduped) this.redis.scripts.queueAppendManyDedup(pipeline, this.runInput(run));
        else this.redis.scripts.queueAppendMany(pipeline, run);
      });
    } else for (const p of prepared) queueOne(p);
    if (replicated) pipeline.wait(replicas, timeoutMs);
    const queued = pipeline.length;
    const answered = await withDeadline(
      pipeline.exec().then((replies) => replies ?? []),
      deadlineMs,
      (): AppendReply[] => {
        const timedOut = new PublishTimeoutError(deadlineMs, prepared.length, true);
        return Array.from({ length: queued }, (): AppendReply => [timedOut, null]);
      },
    );
    if (unindexed) answered.shift();
    let confirmed = Infinity;
    if (replicated) {
      const [waitError, count] = answered.pop() ?? [new Error('no reply to WAIT'), 0];
      confirmed = waitError ? 0 : Number(count);
    }
    if (runs.length === 0) return { replies: answered, confirmed };
    runs.forEach((run, r) => {
      const [error, reply] = answered[r] ?? [new Error('no reply'), null];
      if (run.indexes.length === 1 && !run.guard) replies[run.indexes[0]] = [error, reply];
      else if (error) for (const index of run.indexes) replies[index] = [error, null];
      else if (run.deduped) settleDedupReply(replies, run.indexes, reply as AppendManyDedupReply);
      else settleManyReply(replies, run.indexes, reply as AppendManyReply);
    });
    return { replies, confirmed };
  }

  /**
   * Sends a `publishMany` of events without producer dedup as one transaction
   * of plain XADDs (`appendTransaction`): Redis appends all of them or, when it
   * refuses one as it queues them (over `maxmemory`, a read-only replica),
   * none; each costs it what an XADD does, where the appendMany script costs
   * about 1.4 times as much. Where a transaction went on this connection
   * before, it is written in parts of `STREAMED_RUN_EVENTS` as its data is
   * serialised, so Redis queues each part while the next is built; data
   * refused then (a getter that answers differently when read again) ends it
   * with DISCARD: nothing appended, every event `not-appended` (unless Redis
   * refused its MULTI: see `settleDiscarded`). False, with nothing sent, when
   * the call cannot go this way: a big entry among the events (its offset is
   * indexed as it lands, which runs do), fields over `RUN_BYTES`, or a
   * connection a transaction cannot be written to now; the caller sends runs.
   * Found after a part was written, the rest goes as runs behind it
   * (`commitThenRuns`).
   */
  private sendTransaction(prepared: Prepared[], replies: AppendReply[], sent: Array<Promise<void>>, sendNow: () => void): boolean {
    const transaction = this.redis.scripts.beginTransaction();
    if (!transaction) return false;
    let bytes = 0;
    /** The events added to it, and written (flushed) of them. */
    let added = 0;
    let written = 0;
    try {
      for (; added < prepared.length; added++) {
        const fields = this.fieldsOf(prepared[added]);
        if (isBigEntry(fields)) throw SEND_AS_RUNS;
        for (let f = 0; f < fields.length; f++) bytes += fields[f].length;
        if (bytes > RUN_BYTES) throw SEND_AS_RUNS;
        transaction.add(prepared[added].partition, fields);
        // Where a transaction went on this connection before: written in parts as it is built, so Redis
        // queues each while the next is serialised (the first one is built whole: see `streamable`).
        if (transaction.streamable && (added + 1) % STREAMED_RUN_EVENTS === 0 && added + 1 < prepared.length) {
          transaction.flush();
          written = added + 1;
          sendNow();
        }
      }
    } catch (error) {
      if (error === SEND_AS_RUNS) {
        if (!transaction.started) return false;
        this.commitThenRuns(transaction, added, prepared, replies, sent, sendNow);
        return true;
      }
      // Every event is reported `not-appended` (an unexpected error as the refusal's cause), once Redis's
      // answer to the parts written says nothing of them was appended.
      const refusal = asError(error);
      const reported = outcomeOf(refusal) === 'not-appended' ? refusal : new AppendRefused(`not sent: ${describeError(error)}`);
      if (transaction.started) sent.push(settleDiscarded(replies, prepared.length, written, reported, transaction.discard()));
      else for (let i = 0; i < prepared.length; i++) replies[i] = [reported, null];
      return true;
    }
    sent.push(settleTransaction(replies, prepared.length, transaction.commit()));
    return true;
  }

  /**
   * A transaction written in parts that cannot take the rest of the call (a
   * big entry at `added`, or fields over `RUN_BYTES`): the events added to it
   * are committed with it, and the rest go as runs behind its EXEC. Each
   * partition with events on both sides has its run guard set inside the
   * transaction and its runs start after it, so they land only if it did:
   * what lands stays a prefix per partition. Not DISCARD and runs for every
   * event: where Redis refused the MULTI (an ACL changed at run time), the
   * XADDs written ran on their own, and the runs would append them again.
   */
  private commitThenRuns(
    transaction: AppendTransaction,
    added: number,
    prepared: Prepared[],
    replies: AppendReply[],
    sent: Array<Promise<void>>,
    sendNow: () => void,
  ): void {
    const before = new Set<number>();
    for (let i = 0; i < added; i++) before.add(prepared[i].partition);
    const guarded = new Set<number>();
    const call = nextCallId();
    for (let i = added; i < prepared.length; i++) {
      const { partition } = prepared[i];
      if (!before.has(partition) || guarded.has(partition)) continue;
      guarded.add(partition);
      transaction.guardRuns(partition, call, RUN_GUARD_TTL_MS);
    }
    sent.push(settleTransaction(replies, added, transaction.commit()));
    this.sendRuns(prepared, replies, sent, sendNow, { from: added, call, guarded });
  }

  /**
   * Up to 128 appends of concurrent `publish` calls queued in one tick (the
   * coalescer splits a tick of more, see `TOGETHER_MOST`), as one transaction
   * of plain XADDs (`appendTransaction`): one command for Redis to answer and
   * this process to read, instead of one per call. Redis appends
   * all of them or, refusing one as it queues them (over `maxmemory`), none:
   * each call is answered as what its own append came to. Undefined, with
   * nothing sent, where that cannot go (a big entry among them, over
   * `RUN_BYTES`, a connection a transaction cannot be written to now): they
   * go one by one then.
   */
  private appendTogether(batch: Prepared[]): Promise<TransactionOutcome> | undefined {
    if (this.redis.isCluster) return undefined;
    const events = new Array<{ partition: number; fields: string[] }>(batch.length);
    let bytes = 0;
    for (let i = 0; i < batch.length; i++) {
      // A coalesced publish's fields are written when it is prepared.
      const fields = batch[i].fields as string[];
      if (isBigEntry(fields)) return undefined;
      for (let f = 0; f < fields.length; f++) bytes += fields[f].length;
      if (bytes > RUN_BYTES) return undefined;
      events[i] = { partition: batch[i].partition, fields };
    }
    return this.redis.scripts.appendTransaction(events);
  }

  /**
   * Sends `prepared` as runs (see `buildRuns`) on the publisher's connection:
   * a run of one as a plain append, a run of events without ids as one
   * appendMany call, a run with producer dedup as one appendManyDedup call.
   * The commands leave in the order they are sent here. With `sendNow` (a `publishMany`), runs hold at most `STREAMED_RUN_EVENTS`
   * and each leaves at once, so Redis starts on it while the next is built;
   * single appends leave with what follows them. With `after`, only the
   * events from `after.from` on (see `RunsAfter`).
   */
  private sendRuns(
    prepared: Prepared[],
    replies: AppendReply[],
    sent: Array<Promise<void>>,
    sendNow?: () => void,
    after?: RunsAfter,
  ): void {
    const { scripts } = this.redis;
    const inRun = new Uint8Array(prepared.length);
    const from = after?.from ?? 0;
    try {
      this.buildRuns(prepared, sendNow ? STREAMED_RUN_EVENTS : RUN_EVENTS, after, (run) => {
        const { indexes, guard } = run;
        for (const index of indexes) inRun[index] = 1;
        if (indexes.length === 1 && !guard) sent.push(this.settleInto(replies, indexes[0], this.appendOne(prepared[indexes[0]])));
        else if (run.deduped) sent.push(this.settleDedupRun(replies, indexes, scripts.appendManyDedup(this.runInput(run))));
        else sent.push(this.settleRun(replies, indexes, scripts.appendMany(run)));
        if (indexes.length > 1 || guard) sendNow?.();
      });
    } catch (error) {
      // Data that serialised differently from how it was checked (a getter that answers differently when read
      // again): that event and every one not in a run yet are not sent, and reported `not-appended` whatever the
      // error (an unexpected one as the refusal's cause). What was sent is a prefix per partition.
      const refusal = asError(error);
      const reported = outcomeOf(refusal) === 'not-appended' ? refusal : new AppendRefused(`not sent: ${describeError(error)}`);
      for (let i = from; i < prepared.length; i++) if (inRun[i] === 0) replies[i] = [reported, null];
    }
  }

  /**
   * Cuts `prepared` into runs and hands each to `emit` as soon as it is
   * built: per partition, in order, consecutive events without their own id,
   * or consecutive events with producer dedup (at most `most` events and
   * about `RUN_BYTES` of fields each, so a call stays far below Redis's query
   * buffer limit). Order holds per partition, which is what is promised.
   *
   * A partition that takes more than one run gets a guard on each: Redis
   * counts a command's own arguments against `maxmemory`, so it can refuse a
   * big run and take the small one after it, and the guard makes each run
   * land only when the runs before it did. What lands is then a prefix of
   * what was sent to the partition. A partition of one run, the common case,
   * has no guard and costs nothing more. With `after`, only the events from
   * `after.from` on, each `after.guarded` partition's runs counted after the
   * one that set its guard.
   */
  private buildRuns(prepared: Prepared[], most: number, after: RunsAfter | undefined, emit: (run: Run) => void): void {
    const byPartition = new Map<number, number[]>();
    for (let i = after?.from ?? 0; i < prepared.length; i++) {
      const indexes = byPartition.get(prepared[i].partition);
      if (indexes) indexes.push(i);
      else byPartition.set(prepared[i].partition, [i]);
    }
    for (const [partition, indexes] of byPartition) {
      let run: number[] = [];
      let deduped = false;
      let ids: string[] = [];
      let events: Array<string | number> = [];
      /** The field count of every event of `run` so far (without dedup: their values alone are in `events`); -1 once two differ. */
      let width = 0;
      let bytes = 0;
      const continued = after?.guarded.has(partition) === true;
      let runsBefore = continued ? 1 : 0;
      let call = continued ? after?.call : undefined;
      const flush = (more: boolean): void => {
        if (run.length === 0) return;
        let guard: RunGuard | undefined;
        if (runsBefore > 0 || more) guard = { call: (call ??= nextCallId()), runsBefore, more, ttlMs: RUN_GUARD_TTL_MS };
        // Events of different widths (a rare run) go with their counts.
        if (width < 0) events = counted(prepared, run);
        emit({ partition, indexes: run, deduped, ids, events, width: Math.max(width, 0), guard });
        runsBefore++;
        run = [];
        ids = [];
        events = [];
        width = 0;
        bytes = 0;
      };
      for (let j = 0; j < indexes.length; j++) {
        const index = indexes[j];
        const p = prepared[index];
        const fields = this.fieldsOf(p);
        const dedup = p.dedup && p.id !== undefined;
        if (dedup !== deduped) flush(true);
        deduped = dedup;
        if (dedup) {
          ids.push(p.id as string);
          events.push(fields.length);
        } else if (width !== fields.length) width = run.length === 0 ? fields.length : -1;
        for (const field of fields) {
          events.push(field);
          bytes += field.length;
        }
        run.push(index);
        if (run.length >= most || bytes >= RUN_BYTES) flush(j < indexes.length - 1);
      }
      flush(false);
    }
  }

  /** The appendManyDedup call of a run with producer dedup. */
  private runInput({ partition, ids, events, guard }: Run): AppendManyDedupInput {
    return { partition, ids, windowMs: this.options.dedupWindowMs, events, guard };
  }

  /** Records one append's outcome at `index`. */
  private settleInto(replies: AppendReply[], index: number, append: Promise<unknown>): Promise<void> {
    return append.then(
      (reply) => void (replies[index] = [null, reply]),
      (error: unknown) => void (replies[index] = [asError(error), null]),
    );
  }

  /** Records a run's outcomes: the offsets of the events appended, a refusal for the ones from the failed append on. */
  private settleRun(replies: AppendReply[], run: number[], append: Promise<AppendManyReply>): Promise<void> {
    return append.then(
      (reply) => settleManyReply(replies, run, reply),
      (error: unknown) => {
        for (const index of run) replies[index] = [asError(error), null];
      },
    );
  }

  /** Records a dedup run's outcomes as `publishDedup` replies (`[offset, duplicate]`), and a refusal for the events not done. */
  private settleDedupRun(replies: AppendReply[], run: number[], append: Promise<AppendManyDedupReply>): Promise<void> {
    return append.then(
      (reply) => settleDedupReply(replies, run, reply),
      (error: unknown) => {
        for (const index of run) replies[index] = [asError(error), null];
      },
    );
  }

  /**
   * Whether this connection may run the appendMany script, as far as known
   * now. The first call asks, in the background, with a call that appends
   * nothing, and answers false until the answer is in (a batch sent before,
   * which `scriptsAsked` makes rare, goes as one XADD per event). Where scripting is refused (an ACL without EVALSHA, a
   * provider that disables it), `publishMany` keeps sending one XADD per
   * event, as before the script existed.
   */
  private appendManyWorks(): boolean {
    if (this.appendManyOk !== undefined) return this.appendManyOk;
    this.appendManyAsked ??= this.redis.scripts.checkAppendMany().then(
      () => void (this.appendManyOk = true),
      (error: unknown) => {
        if (isRefusal(describeError(error))) {
          this.appendManyOk = false;
          // Big entries go as plain XADDs then, their partition marked as not indexed (the door's `append`).
          this.redis.scripts.scriptsRefused();
        }
        this.appendManyAsked = undefined; // not answered (a lost connection): ask again next time
      },
    );
    return false;
  }

  /** Sends one append on the publisher's connection: an XADD, or the dedup script for an event with its own id. */
  private appendOne(p: Prepared): Promise<unknown> {
    const { scripts } = this.redis;
    if (p.dedup && p.id !== undefined)
      return scripts.publishDedup({ partition: p.partition, id: p.id, windowMs: this.options.dedupWindowMs, fields: this.fieldsOf(p) });
    return scripts.append(p.partition, this.fieldsOf(p));
  }

  /**
   * The event's XADD field arguments, its data serialised now if it waited
   * (`Unwritten`). Its walk bounded the JSON within `maxPayloadBytes`, so only
   * data that reads differently the second time (a getter) can be refused here.
   */
  private fieldsOf(p: Prepared): string[] {
    if (p.fields !== null) return p.fields;
    const { data, key, time, headers } = p.unwritten as Unwritten;
    let json: string;
    try {
      json = this.serialised(p.event, data);
    } catch (error) {
      // Whatever a getter threw here (an eventrail error of another kind included) refuses the data: typed, not sent.
      if (error instanceof InvalidEventDataError || error instanceof PayloadTooLargeError) throw error;
      throw new InvalidEventDataError(p.event, 'data', `cannot be serialised (${describeError(error)})`);
    }
    p.fields = encodeFields({ id: p.id, event: p.event, key, time, data: json, headers });
    p.unwritten = undefined;
    return p.fields;
  }

  /** Every event's fields, before anything is sent: the ways other than streamed runs. */
  private writeAll(prepared: Prepared[]): void {
    for (const p of prepared) this.fieldsOf(p);
  }

  /** `data` as JSON, refused when it cannot be serialised or is over `maxPayloadBytes`. */
  private serialised(event: string, data: unknown): string {
    const json = stringifyChecked(data, (reason) => new InvalidEventDataError(event, 'data', reason)) as string | undefined;
    // A toJSON that answers undefined (the walk cannot see what it will answer): no JSON at all.
    if (json === undefined) throw new InvalidEventDataError(event, 'data', 'serialises to nothing (a toJSON that answers undefined)');
    return this.bounded(event, json);
  }

  /** `json`, refused when it is over `maxPayloadBytes`. */
  private bounded(event: string, json: string): string {
    const max = this.options.maxPayloadBytes;
    // A UTF-16 length of a third of the limit cannot exceed it in UTF-8: skip the byte count then.
    if (json.length * 3 > max) {
      const bytes = Buffer.byteLength(json, 'utf8');
      if (bytes > max) throw new PayloadTooLargeError(event, bytes, max);
    }
    return json;
  }

  /** The event id readers derive for an entry appended without one (an unanswered append has none yet). */
  private derivedId(partition: number, offset: string | null): string {
    return typeof offset === 'string' ? derivedEventId(this.redis.keys.logTag, partition, offset) : '';
  }

  /** How long an append waits for its answers: `publishTimeoutMs`, and the `WAIT`'s own timeout when it waits for replicas. */
  private deadlineMs(replicated: boolean): number {
    return this.options.publishTimeoutMs + (replicated ? this.options.replication.timeoutMs : 0);
  }

  private replicated(event: string, durability: Durability | undefined): boolean {
    const chosen = durability ?? this.options.durability;
    if (chosen !== 'acknowledged' && chosen !== 'replicated') {
      throw new InvalidPublishOptionsError(event, 'durability', `must be 'acknowledged' or 'replicated', got ${String(chosen)}`);
    }
    return chosen === 'replicated';
  }

  /**
   * Checks one event and encodes it. With `unwritten` (a `publishMany` sent as streamed runs), data whose
   * walk bounds its JSON within `maxPayloadBytes` is serialised later, as its run is built (`fieldsOf`).
   * With `stored` (`publishStored`), that text is the data's JSON.
   */
  private prepare(event: string, data: unknown, options: PublishOptions, now: number, unwritten = false, stored?: string): Prepared {
    validateEventName(event);
    if (options === null || typeof options !== 'object') {
      throw new InvalidPublishOptionsError(event, 'options', 'must be an object');
    }
    let json: string | undefined;
    // The walk refuses what is not plain JSON (a Date, a function; parsed from a stored text, a number
    // out of range or nesting too deep) and bounds the JSON's size.
    const bound = jsonBytesBound(event, data);
    // A stored text is measured as it is: its whitespace and escapes count.
    if (stored !== undefined) json = this.bounded(event, stored);
    else if (!unwritten || bound > this.options.maxPayloadBytes) json = this.serialised(event, data);
    const { key, headers, id } = options;
    let headersJson: string | undefined;
    if (headers !== undefined) {
      validateHeaders(event, headers);
      if (Object.keys(headers).length > 0)
        headersJson = stringifyChecked(headers, (reason) => new InvalidHeadersError(event, '(all)', reason));
    }
    if (key !== undefined && (typeof key !== 'string' || key.length === 0 || key.length > MAX_KEY_LENGTH)) {
      throw new InvalidPublishOptionsError(event, 'key', `must be a non-empty string of at most ${MAX_KEY_LENGTH} characters`);
    }
    if (id !== undefined && (typeof id !== 'string' || id.length === 0 || id.length > MAX_ID_LENGTH)) {
      throw new InvalidPublishOptionsError(event, 'id', `must be a non-empty string of at most ${MAX_ID_LENGTH} characters`);
    }
    const partition = this.partitionOf(event, key, options.partition);
    // Without an id, the entry says only what its stream id does not: readers derive the id and time from it.
    const time = id === undefined ? undefined : now;
    const dedup = id !== undefined && this.options.dedupWindowMs > 0;
    if (json === undefined) return { event, partition, id, fields: null, unwritten: { data, key, time, headers: headersJson }, dedup };
    const fields = encodeFields({ id, event, key, time, data: json, headers: headersJson });
    return { event, partition, id, fields, unwritten: undefined, dedup };
  }

  private partitionOf(event: string, key: string | undefined, partition: number | undefined): number {
    const partitions = this.options.partitions;
    if (partition === undefined) return key === undefined ? 0 : partitionForKey(key, partitions);
    if (key !== undefined) {
      throw new InvalidPublishOptionsError(event, 'partition', 'cannot be combined with key (the key picks the partition)');
    }
    if (!Number.isInteger(partition) || partition < 0 || partition >= partitions) {
      throw new InvalidPublishOptionsError(event, 'partition', `must be an integer from 0 to ${partitions - 1}, got ${String(partition)}`);
    }
    return partition;
  }

  private assertReady(): void {
    if (!this.redis.isReady()) {
      throw new RedisUnavailableError('the connection is not ready, the event was not appended');
    }
  }
}

/** What to do about a publish a full Redis refused; its message says nothing was appended. */
const FULL_HINT =
  'Nothing was appended. Free memory first (run retention, purge dead letters, prune stale groups) or raise maxmemory, ' +
  'then publish again; see "Redis full or down" in docs/operations/runbook.md';

/** `error` as a `RedisFullError` for a publish of `event` when it is Redis's OOM refusal, else undefined. */
function outOfMemory(event: string, error: unknown): RedisFullError | undefined {
  if (!RedisFullError.isOutOfMemory(error)) return undefined;
  return new RedisFullError(`publish "${event}"`, (error as Error).message, FULL_HINT);
}

/**
 * The error of a coalesced `publish` whose append failed: an OOM refusal is a
 * `RedisFullError`, another error reply (Redis refused it: nothing was
 * appended) or a lost connection (it may have been) a `RedisUnavailableError`
 * that says which.
 */
function publishFailed(event: string, error: unknown): Error {
  const full = outOfMemory(event, error);
  if (full) return full;
  if (error instanceof Error && outcomeOf(error) === 'not-appended')
    return new RedisUnavailableError(`publish of "${event}" was refused, nothing was appended`, error);
  return new RedisUnavailableError(`publish of "${event}" failed after it was sent: it may or may not have been appended`, error);
}

/** Records the outcome of a transaction's first `count` appends (the commands after them are not events). */
function settleTransaction(replies: AppendReply[], count: number, commit: Promise<TransactionOutcome>): Promise<void> {
  return commit.then(
    (answers) => {
      for (let i = 0; i < count; i++) {
        const answer = answers[i];
        replies[i] = typeof answer === 'string' ? [null, answer] : [answer, null];
      }
    },
    (error: unknown) => {
      const failure = asError(error);
      for (let i = 0; i < count; i++) replies[i] = [failure, null];
    },
  );
}

/**
 * Records a call of `count` events whose transaction was discarded after its
 * first `written` were written, `refusal` being why: once Redis answered its
 * MULTI, so that none is reported not appended while in the log. Where Redis
 * refused the MULTI, those written ran on their own and each has its own
 * outcome; where the MULTI's answer was lost, they may or may not have run.
 */
function settleDiscarded(
  replies: AppendReply[],
  count: number,
  written: number,
  refusal: Error,
  discarded: Promise<TransactionOutcome | undefined>,
): Promise<void> {
  return discarded.then(
    (ran) => {
      for (let i = 0; i < count; i++) {
        const answer = ran?.[i];
        replies[i] = typeof answer === 'string' ? [null, answer] : [answer ?? refusal, null];
      }
    },
    (error: unknown) => {
      const lost = asError(error);
      for (let i = 0; i < count; i++) replies[i] = [i < written ? lost : refusal, null];
    },
  );
}

/** Records an appendMany reply for the events of `run` (see `settleRun`). */
function settleManyReply(replies: AppendReply[], run: number[], [offsets, failure]: AppendManyReply): void {
  for (let i = 0; i < run.length; i++) {
    replies[run[i]] = i < offsets.length ? [null, offsets[i]] : [new AppendRefused(failure ?? 'not appended'), null];
  }
}

/** Records an appendManyDedup reply for the events of `run` (see `settleDedupRun`). */
function settleDedupReply(replies: AppendReply[], run: number[], [offsets, duplicates, failure]: AppendManyDedupReply): void {
  for (let i = 0; i < run.length; i++) {
    if (i >= offsets.length) replies[run[i]] = [new AppendRefused(failure ?? 'not appended'), null];
    else replies[run[i]] = [null, [offsets[i], duplicates[i]]];
  }
}

/** The events of `run` as `PackedEvents`: each one's field count, then its fields. */
function counted(prepared: Prepared[], run: number[]): PackedEvents {
  const events: PackedEvents = [];
  for (const index of run) {
    const fields = prepared[index].fields as string[];
    events.push(fields.length);
    for (const field of fields) events.push(field);
  }
  return events;
}

/** A call id for run guards: unique per process, and random across processes. */
const CALL_PREFIX = randomBytes(6).toString('hex');
let calls = 0;
function nextCallId(): string {
  calls = (calls + 1) % Number.MAX_SAFE_INTEGER;
  return `${CALL_PREFIX}${calls.toString(36)}`;
}

function asError(reason: unknown): Error {
  return reason instanceof Error ? reason : new Error(String(reason));
}

/** A batch is replicated if any of its events asks for it. */
function mostDurable(events: ReadonlyArray<PublishInput>): Durability | undefined {
  let chosen: Durability | undefined;
  for (const e of events) {
    if (e?.durability === 'replicated') return 'replicated';
    chosen ??= e?.durability;
  }
  return chosen;
}

/**
 * JSON of a value that passed validation. A getter or proxy that behaved
 * while it was checked and throws only now is still bad input: a typed
 * error, never a crash or a half-built entry.
 */
function stringifyChecked(value: unknown, invalid: (reason: string) => EventrailError): string {
  try {
    return JSON.stringify(value);
  } catch (error) {
    if (error instanceof EventrailError) throw error;
    throw invalid(`cannot be serialised (${describeError(error)})`);
  }
}
