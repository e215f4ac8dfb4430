import type { ResolvedLogOptions } from '../config/log.options';
import { InvalidOptionError } from '../errors/invalid-option.error';
import type { EventrailMetrics } from '../metrics/eventrail-metrics';
import type { ResolvedConnectionOptions } from '../redis/connection.options';
import { checkBoolean, checkInteger, checkObject, optionNames, rejectUnknownKeys } from '../config/option-checks';
import { isStreamId } from '../wire/stream-id';

/** Where a group starts reading when it has no committed offset yet. */
export type InitialOffset = { mode: 'fromStart' } | { mode: 'fromEnd' } | { mode: 'fromId'; id: string } | { mode: 'fromTime'; time: Date };

/**
 * What a message that keeps failing holds back: its partition while it retries in place (`'partition'`),
 * only its key (`'key'`: it is parked at its first failure, with the later messages of its key behind it,
 * and other keys go on), or nothing (`'unordered'`: only the message is parked).
 */
export type Ordering = 'partition' | 'key' | 'unordered';

export const ORDERINGS: readonly Ordering[] = Object.freeze(['partition', 'key', 'unordered']);

/** The parked stage of `'key'` and `'unordered'` ordering: when a parked message is tried again, and for how long. */
export interface RedeliveryOptions {
  /**
   * Wait before the first redelivery of a parked message.
   * @default 2000
   */
  delayMs?: number;
  /**
   * Each wait is the previous one times this (with jitter), up to `maxDelayMs`.
   * @default 2
   */
  factor?: number;
  /**
   * Longest wait between two redeliveries.
   * @default 300000 (5 min)
   */
  maxDelayMs?: number;
  /**
   * A parked message failing for this long (since its first failure) is dead-lettered (`retries-exhausted`)
   * and the next message of its key becomes the head.
   * @default 3600000 (1 h)
   */
  maxAgeMs?: number;
}

/** Options of one consumer group. Set them module-wide under `consumer`, per group under `groups.<name>`, or in `@OnEvent`. */
export interface ConsumerOptions {
  /**
   * Handler calls in flight at once in this process for the group, across its
   * partitions. Events with the same key never run at the same time.
   * @default 1
   */
  concurrency?: number;
  /**
   * Entries read from a partition per round trip, and handled between two commits.
   * @default 200
   */
  batchSize?: number;
  /**
   * While a partition is behind (a read came back full), read its next batches with a script that stops
   * each at `maxReadBytes` whatever the entries' sizes (it takes them in chunks of `XRANGE` and sums
   * their sizes; the name is older than the reply's shape, which is no longer packed). About 3.5 µs of
   * Redis CPU per entry read against 0.8 for `XREAD`, per group. Off, reads are `XREAD`s sized by the
   * entries of recent reads, which a burst of entries far bigger than those can take past the bound.
   * Caught-up consumers wait in `XREAD BLOCK` either way.
   * @default true
   */
  packedBacklogReads?: boolean;
  /**
   * Bytes one read of a partition may bring (its reply is buffered whole in Redis, counting against
   * `maxmemory` and the client output buffer limit): fewer than `batchSize` entries are read when
   * that many would be more; one entry at least. While a partition is behind, the read script stops at
   * it whatever the entries' sizes; a read that waits for new entries is sized by the biggest of late.
   * @default 4194304 (4 MiB)
   */
  maxReadBytes?: number;
  /**
   * Lease TTL of a (group, partition). Renewed every third of it while the worker lives;
   * a crashed worker's partitions are taken over after it.
   * @default 30000
   */
  lockTtlMs?: number;
  /**
   * Membership heartbeat TTL. A worker that has not heartbeated for this long stops counting
   * in the fair share.
   * @default 30000
   */
  heartbeatTtlMs?: number;
  /**
   * On shutdown or hand-back, how long to wait for running handlers before committing what is done and
   * leaving. The lease stays renewed meanwhile, so this may be longer than `lockTtlMs`.
   * @default 10000
   */
  shutdownTimeoutMs?: number;
  /**
   * Where a group with no committed offset starts. Applied once, when the group first reads a partition.
   * @default { mode: 'fromStart' }
   */
  initialOffset?: InitialOffset;
  /**
   * What a failing message holds back (see `Ordering`). With `'key'` or `'unordered'`, the message is
   * parked at its first failure (no retry in place) and comes back through quick tiers (`maxRetries`,
   * `retryBackoffMs`, `retryBackoffMaxMs`: 2, 200 ms, 2 s by default) and then the `redelivery` tiers.
   * With `'partition'` it is retried in place (5 times, 1 s doubling to 30 s, by default), then dead-lettered.
   * @default 'key'
   */
  ordering?: Ordering;
  /** The tiers of the parked stage (`ordering` `'key'` or `'unordered'`); ignored with `'partition'`. */
  redelivery?: RedeliveryOptions;
  /**
   * Retries of a failing handler, in place, before the message is given up. With `ordering` `'key'` or
   * `'unordered'`: the quick redeliveries of a parked message, before its `redelivery` tiers.
   * Where `maxRetryAgeMs` is set without `maxRetries` next to it (in the same options object), the count
   * is unlimited and the time budget alone decides (`'partition'` only).
   * @default 2 (5 with `ordering: 'partition'`)
   */
  maxRetries?: number;
  /**
   * Retry by time: a failing message is retried (with the capped backoff, the partition waiting) until it
   * has been failing for this long, then given up (`retries-exhausted`). With `maxRetries` set as well,
   * whichever limit comes first. 0 turns it off (count-based retries only, as the original eventrail).
   * With `ordering` `'key'` or `'unordered'` there is no retry in place: set here, it is how long a parked
   * message may fail (`redelivery.maxAgeMs`), unless that is set next to it.
   * @default 0
   */
  maxRetryAgeMs?: number;
  /**
   * First retry delay; doubles on every retry, with jitter. With `ordering` `'key'` or `'unordered'`: of
   * the quick tiers.
   * @default 200 (1000 with `ordering: 'partition'`)
   */
  retryBackoffMs?: number;
  /**
   * Upper bound of the retry delay. With `ordering` `'key'` or `'unordered'`: of the quick tiers.
   * @default 2000 (30000 with `ordering: 'partition'`)
   */
  retryBackoffMaxMs?: number;
  /**
   * Deliveries of one entry by workers that then died (a message that crashes the process) before it is
   * dead-lettered unhandled. Counted only when a worker takes over a partition whose lease expired.
   * @default 10
   */
  maxDeliveries?: number;
  /**
   * A handler that has not settled after this long counts as a failed attempt (`HandlerTimeoutError`).
   * It is not cancelled. 0 turns the timeout off.
   * @default 0
   */
  handlerTimeoutMs?: number;
  /**
   * Record every handled event id with the offset commit, and skip an event whose id is already recorded
   * (a redelivery after a crash, or the same event published twice).
   * @default false
   */
  enableIdempotency?: boolean;
  /**
   * How long an idempotency record is kept.
   * @default 86400000 (24 h)
   */
  idempotencyTtlMs?: number;
}

export type ResolvedConsumerOptions = Required<Omit<ConsumerOptions, 'redelivery'>> & { redelivery: Required<RedeliveryOptions> };
/** `batch` in `@OnEvent` options: the method takes `EventrailMessage[]`, consecutive messages of one partition. */
export interface BatchOptions {
  /**
   * Most messages per call.
   * @default 100
   */
  maxSize?: number;
  /**
   * When a read brings fewer than `maxSize` messages, how long to wait for more before calling the
   * handler (the blocking read's timeout: nothing polls). 0 calls it with what one read brought.
   * @default 0
   */
  maxWaitMs?: number;
}

/** The module options about the consumers of this process: defaults for every group, overrides per group. */
export interface ConsumersOptions {
  /** Defaults for every consumer group. */
  consumer?: ConsumerOptions;
  /** Overrides per group name. */
  groups?: Record<string, ConsumerOptions>;
  /**
   * Start the consumers when the application bootstraps. With `false`, call `EventrailConsumers.start()`.
   * @default true
   */
  autoStart?: boolean;
}

export interface ResolvedConsumersOptions {
  consumer: ResolvedConsumerOptions;
  groups: Record<string, ConsumerOptions>;
  autoStart: boolean;
}

export const CONSUMER_OPTION_NAMES = optionNames<ConsumerOptions>()([
  'concurrency',
  'batchSize',
  'packedBacklogReads',
  'maxReadBytes',
  'lockTtlMs',
  'heartbeatTtlMs',
  'shutdownTimeoutMs',
  'initialOffset',
  'maxRetries',
  'maxRetryAgeMs',
  'retryBackoffMs',
  'retryBackoffMaxMs',
  'maxDeliveries',
  'handlerTimeoutMs',
  'enableIdempotency',
  'idempotencyTtlMs',
  'ordering',
  'redelivery',
]);
export const REDELIVERY_OPTION_NAMES = optionNames<RedeliveryOptions>()(['delayMs', 'factor', 'maxDelayMs', 'maxAgeMs']);
export const BATCH_OPTION_NAMES = optionNames<BatchOptions>()(['maxSize', 'maxWaitMs']);
export const CONSUMERS_OPTION_NAMES = optionNames<ConsumersOptions>()(['consumer', 'groups', 'autoStart']);

/** The defaults of every consumer option, keyed as `CONSUMER_OPTION_NAMES` lists them (the type asks for all). */
export const DEFAULT_CONSUMER_OPTIONS: ResolvedConsumerOptions = Object.freeze({
  concurrency: 1,
  batchSize: 200,
  packedBacklogReads: true,
  maxReadBytes: 4 * 1024 * 1024,
  lockTtlMs: 30_000,
  heartbeatTtlMs: 30_000,
  shutdownTimeoutMs: 10_000,
  initialOffset: { mode: 'fromStart' } as InitialOffset,
  maxRetries: 2,
  maxRetryAgeMs: 0,
  retryBackoffMs: 200,
  retryBackoffMaxMs: 2_000,
  maxDeliveries: 10,
  handlerTimeoutMs: 0,
  enableIdempotency: false,
  idempotencyTtlMs: 86_400_000,
  ordering: 'key',
  redelivery: Object.freeze({ delayMs: 2_000, factor: 2, maxDelayMs: 300_000, maxAgeMs: 3_600_000 }),
});

/**
 * The retries in place of `'partition'` ordering, where a failing message holds its partition until it
 * is handled or dead-lettered: about half a minute. They apply where the option was not set. (With
 * `'key'` and `'unordered'`, the defaults above are the quick tiers of a parked message: a few
 * redeliveries hundreds of ms apart, for a blip.)
 */
export const PARTITION_IN_PLACE_DEFAULTS = Object.freeze({ maxRetries: 5, retryBackoffMs: 1_000, retryBackoffMaxMs: 30_000 });
type InPlaceOption = keyof typeof PARTITION_IN_PLACE_DEFAULTS;
const IN_PLACE_OPTIONS = Object.keys(PARTITION_IN_PLACE_DEFAULTS) as InPlaceOption[];

/** What the user set at some level of a resolved options object, where the defaults depend on it (they differ by `ordering`). */
interface Given {
  /** The retry options set. */
  inPlace: ReadonlySet<InPlaceOption>;
  /** The count lifted by a time budget given without one (see `maxRetries`), at the most specific level that set either. */
  lifted: boolean;
  /** `redelivery.maxAgeMs` set at a level no less specific than the last `maxRetryAgeMs`. */
  maxAgeMs: boolean;
}
const givenOf = new WeakMap<ResolvedConsumerOptions, Given>();

/** Defaults of `batch` in `@OnEvent` options (see `BatchOptions`). */
export const DEFAULT_BATCH_OPTIONS: Readonly<Required<BatchOptions>> = Object.freeze({ maxSize: 100, maxWaitMs: 0 });

export const CONSUMERS_DEFAULTS = Object.freeze({ autoStart: true });

/** What the consumers (`EventrailConsumers`, the explorer) read of the resolved module options; tracing adds its own. */
export type ConsumersView = ResolvedLogOptions &
  ResolvedConsumersOptions &
  Pick<ResolvedConnectionOptions, 'allowDegradedStart'> & { metrics: EventrailMetrics };

const GROUP_PATTERN = /^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$/;

/** Resolves `consumer` and validates every `groups.<name>` over it. */
export function resolveConsumersOptions(options: ConsumersOptions): ResolvedConsumersOptions {
  const consumer = resolveConsumerOptions('consumer', options.consumer, DEFAULT_CONSUMER_OPTIONS);
  const groups = options.groups ?? {};
  checkObject('groups', groups, 'an object of group name to consumer options');
  for (const [name, groupOptions] of Object.entries(groups)) {
    validateGroupName(`groups.${name}`, name);
    resolveConsumerOptions(`groups.${name}`, groupOptions, consumer);
  }
  return { consumer, groups, autoStart: checkBoolean('autoStart', options.autoStart ?? CONSUMERS_DEFAULTS.autoStart) };
}

/** Merges `overrides` over `base` and validates the result; `path` names the options in errors. */
export function resolveConsumerOptions(
  path: string,
  overrides: ConsumerOptions | undefined,
  base: ResolvedConsumerOptions,
): ResolvedConsumerOptions {
  if (overrides === undefined) return base;
  checkObject(path, overrides, 'an object of consumer options');
  // `group` is allowed but not offered: it names the group in `@OnEvent` options, next to these.
  rejectUnknownKeys(path, overrides, CONSUMER_OPTION_NAMES, ['group']);
  const merged: ResolvedConsumerOptions = { ...base };
  for (const key of CONSUMER_OPTION_NAMES) {
    const value = overrides[key];
    if (value !== undefined && key !== 'redelivery') (merged as unknown as Record<string, unknown>)[key] = value;
  }
  merged.redelivery = resolveRedelivery(`${path}.redelivery`, overrides.redelivery, base.redelivery);
  if (!ORDERINGS.includes(merged.ordering)) {
    throw new InvalidOptionError(`${path}.ordering`, merged.ordering, `one of ${ORDERINGS.map((o) => `'${o}'`).join(', ')}`);
  }
  const inherited = givenOf.get(base);
  const explicit = new Set(inherited?.inPlace);
  for (const key of IN_PLACE_OPTIONS) if (overrides[key] !== undefined) explicit.add(key);
  // A time budget given without a count: the count no longer limits (see `maxRetries`).
  let lifted = overrides.maxRetries === undefined && (inherited?.lifted ?? false);
  if (overrides.maxRetryAgeMs !== undefined && overrides.maxRetries === undefined && overrides.maxRetryAgeMs !== 0) lifted = true;
  if (lifted) merged.maxRetries = Number.POSITIVE_INFINITY;
  const maxAgeGiven =
    overrides.redelivery?.maxAgeMs !== undefined || ((inherited?.maxAgeMs ?? false) && overrides.maxRetryAgeMs === undefined);
  checkInteger(`${path}.concurrency`, merged.concurrency, 1, 10_000);
  checkInteger(`${path}.batchSize`, merged.batchSize, 1, 10_000);
  checkBoolean(`${path}.packedBacklogReads`, merged.packedBacklogReads);
  checkInteger(`${path}.maxReadBytes`, merged.maxReadBytes, 65_536, 536_870_912);
  checkInteger(`${path}.lockTtlMs`, merged.lockTtlMs, 300, 3_600_000);
  checkInteger(`${path}.heartbeatTtlMs`, merged.heartbeatTtlMs, 300, 3_600_000);
  checkInteger(`${path}.shutdownTimeoutMs`, merged.shutdownTimeoutMs, 0, 3_600_000);
  // Unlimited only by the rule above (or inherited from it); a count given is an integer.
  if (overrides.maxRetries !== undefined || merged.maxRetries !== Number.POSITIVE_INFINITY) {
    checkInteger(`${path}.maxRetries`, merged.maxRetries, 0, 1_000);
  }
  checkInteger(`${path}.maxRetryAgeMs`, merged.maxRetryAgeMs, 0, 30 * 86_400_000);
  checkInteger(`${path}.retryBackoffMs`, merged.retryBackoffMs, 0, 3_600_000);
  checkInteger(`${path}.retryBackoffMaxMs`, merged.retryBackoffMaxMs, 0, 86_400_000);
  checkInteger(`${path}.maxDeliveries`, merged.maxDeliveries, 1, 1_000);
  checkInteger(`${path}.handlerTimeoutMs`, merged.handlerTimeoutMs, 0, 86_400_000);
  checkBoolean(`${path}.enableIdempotency`, merged.enableIdempotency);
  checkInteger(`${path}.idempotencyTtlMs`, merged.idempotencyTtlMs, 1_000, 365 * 86_400_000);
  validateInitialOffset(`${path}.initialOffset`, merged.initialOffset);
  // The retry options mean retries in place with 'partition', the quick tiers of a parked message otherwise.
  for (const key of IN_PLACE_OPTIONS) {
    if (!explicit.has(key))
      merged[key] = merged.ordering === 'partition' ? PARTITION_IN_PLACE_DEFAULTS[key] : DEFAULT_CONSUMER_OPTIONS[key];
  }
  if (merged.ordering === 'partition') {
    if (lifted) merged.maxRetries = Number.POSITIVE_INFINITY;
  } else {
    // No retry in place: a lifted count leaves the quick tiers at their default.
    if (lifted || !Number.isFinite(merged.maxRetries)) merged.maxRetries = DEFAULT_CONSUMER_OPTIONS.maxRetries;
    // Retry by time, where a parked stage follows: how long a parked message may fail, unless that is set itself.
    if (merged.maxRetryAgeMs > 0 && !maxAgeGiven)
      merged.redelivery = Object.freeze({ ...merged.redelivery, maxAgeMs: merged.maxRetryAgeMs });
  }
  givenOf.set(merged, { inPlace: explicit, lifted, maxAgeMs: maxAgeGiven });
  return merged;
}

function resolveRedelivery(
  path: string,
  overrides: RedeliveryOptions | undefined,
  base: Required<RedeliveryOptions>,
): Required<RedeliveryOptions> {
  if (overrides === undefined) return base;
  checkObject(path, overrides, 'an object: { delayMs?, factor?, maxDelayMs?, maxAgeMs? }');
  rejectUnknownKeys(path, overrides, REDELIVERY_OPTION_NAMES);
  const merged = { ...base };
  for (const key of REDELIVERY_OPTION_NAMES) if (overrides[key] !== undefined) merged[key] = overrides[key];
  checkInteger(`${path}.delayMs`, merged.delayMs, 1, 86_400_000);
  if (typeof merged.factor !== 'number' || !(merged.factor >= 1 && merged.factor <= 10)) {
    throw new InvalidOptionError(`${path}.factor`, merged.factor, 'a number from 1 to 10');
  }
  checkInteger(`${path}.maxDelayMs`, merged.maxDelayMs, merged.delayMs, 86_400_000);
  checkInteger(`${path}.maxAgeMs`, merged.maxAgeMs, 0, 30 * 86_400_000);
  return Object.freeze(merged);
}

export function validateGroupName(path: string, name: unknown): asserts name is string {
  if (typeof name !== 'string' || !GROUP_PATTERN.test(name)) {
    throw new InvalidOptionError(path, name, 'a group name of letters, digits, ".", "_" or "-", 1 to 100 characters');
  }
}

function validateInitialOffset(path: string, offset: InitialOffset): void {
  const modes = "{ mode: 'fromStart' | 'fromEnd' } | { mode: 'fromId', id: '<ms>-<seq>' } | { mode: 'fromTime', time: Date }";
  checkObject(path, offset, modes);
  switch (offset.mode) {
    case 'fromStart':
    case 'fromEnd':
      return;
    case 'fromId':
      if (typeof offset.id !== 'string' || !isStreamId(offset.id)) {
        throw new InvalidOptionError(`${path}.id`, offset.id, 'a stream id such as "1700000000000-0"');
      }
      return;
    case 'fromTime':
      if (!(offset.time instanceof Date) || Number.isNaN(offset.time.getTime()) || offset.time.getTime() < 0) {
        throw new InvalidOptionError(`${path}.time`, offset.time, 'a valid Date');
      }
      return;
    default:
      throw new InvalidOptionError(`${path}.mode`, (offset as { mode: unknown }).mode, modes);
  }
}

/** Validates `batch` of an `@OnEvent` and applies its defaults; `path` names it in errors. */
export function resolveBatchOptions(path: string, batch: unknown): { maxSize: number; maxWaitMs: number } {
  checkObject(path, batch, 'an object: { maxSize?, maxWaitMs? }');
  rejectUnknownKeys(path, batch, BATCH_OPTION_NAMES);
  const given = batch as { maxSize?: unknown; maxWaitMs?: unknown };
  return {
    maxSize: checkInteger(`${path}.maxSize`, given.maxSize ?? DEFAULT_BATCH_OPTIONS.maxSize, 1, 10_000),
    maxWaitMs: checkInteger(`${path}.maxWaitMs`, given.maxWaitMs ?? DEFAULT_BATCH_OPTIONS.maxWaitMs, 0, 60_000),
  };
}
