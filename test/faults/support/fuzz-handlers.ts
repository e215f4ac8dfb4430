/**
 * Handlers of the chaos worker's `fuzz` mode (chaos-worker.ts), used by the
 * seeded fault schedules in test/faults/. Every attempt is recorded in Redis
 * (so the records survive the process) in one script that also decides
 * whether the attempt fails and reads the group's idempotency done-mark of
 * the event: the checker can then tell a handling that started after the
 * event was already recorded as done.
 */
import { Injectable, OnModuleDestroy, Type } from '@nestjs/common';
import Redis from 'ioredis';
import { EventrailMessage, NonRetryableError, OnEvent, RedisFullError } from '../../../lib';
import { PartitionLease } from '../../../lib/consumer/coordination/lease';
import { EventrailKeys } from '../../../lib/redis/keys';
import { chaosKeys, encodeAttemptHead, EVENTS, FUZZ_MARK_TTL_MS, FuzzData, GROUPS } from './chaos-protocol';

/**
 * Date.now() of this process's last lease check that found the lease valid. The library checks a
 * partition's lease before it calls each handler, and calls the handler right after (no await between
 * on its common path): read at the handler's start, it says when the check that let it start was made,
 * which the checker needs to tell a fencing bug from a SIGSTOP that landed between that check and the
 * handler (invariants.ts, checkIdempotency). Recorded by wrapping `PartitionLease.mayHaveExpired`.
 */
let leaseCheckedAt = 0;
const leaseCheck = Object.getOwnPropertyDescriptor(PartitionLease.prototype, 'mayHaveExpired')?.get;
if (!leaseCheck) throw new Error('PartitionLease.mayHaveExpired is not a getter: the fuzz records cannot tell when the lease was checked');
Object.defineProperty(PartitionLease.prototype, 'mayHaveExpired', {
  configurable: true,
  get(this: PartitionLease): boolean {
    const expired = leaseCheck.call(this) as boolean;
    if (!expired) leaseCheckedAt = Date.now();
    return expired;
  },
});

/** How often a record refused by a full Redis is tried again. */
const OUT_OF_MEMORY_WAIT_MS = 50;

/** Verdicts of the recording script. */
const SUCCEEDS = 0;
const TRANSIENT = 1;
const POISONED = 2;

@Injectable()
export class FuzzRecords implements OnModuleDestroy {
  /**
   * No retry limit: while Redis is down a handler waits for it instead of
   * failing, so only the failures the events ask for count as attempts (an
   * outage never dead-letters an event that was not made to fail).
   */
  readonly redis = new Redis(process.env.EVENTRAIL_REDIS_URL as string, { maxRetriesPerRequest: null });
  private readonly prefix = process.env.EVENTRAIL_PREFIX as string;
  private readonly keys = new EventrailKeys(this.prefix, Number(process.env.CHAOS_PARTITIONS));

  constructor() {
    this.redis.on('error', () => undefined);
    this.redis.defineCommand('fuzzAttempt', {
      numberOfKeys: 3,
      lua: `
        -- KEYS: attempts list, cured set, the group's done-marks of the partition
        -- ARGV: event id, group, '1' when this attempt is a transient failure, poison kind or '', record head
        -- Returns 0 succeeds, 1 transient failure, 2 poisoned.
        local verdict = 0
        if ARGV[3] == '1' then verdict = 1 end
        if ARGV[4] ~= '' and redis.call('SISMEMBER', KEYS[2], ARGV[2] .. '|' .. ARGV[1]) == 0 then verdict = 2 end
        local mark = redis.call('ZSCORE', KEYS[3], ARGV[1]) or ''
        local outcome = ({ [0] = 'H', [1] = 'T', [2] = 'P' })[verdict]
        redis.call('RPUSH', KEYS[1], ARGV[5] .. '|' .. outcome .. '|' .. mark)
        return verdict`,
    });
  }

  async attempt(message: EventrailMessage<FuzzData>): Promise<void> {
    const startedAt = Date.now();
    const checkedAt = leaseCheckedAt;
    const { group, partition, offset, id, key, attempt, data } = message;
    const poison = data.poison?.[group] ?? '';
    const head = encodeAttemptHead({
      group,
      partition,
      offset,
      eventId: id,
      key: key ?? '',
      attempt,
      pid: process.pid,
      startedAt,
      checkedAt,
    });
    const run = (this.redis as unknown as { fuzzAttempt: (...args: Array<string | number>) => Promise<number> }).fuzzAttempt;
    const record = (): Promise<number> =>
      run.call(
        this.redis,
        chaosKeys.fuzzAttempts(this.prefix),
        chaosKeys.fuzzCured(this.prefix),
        this.keys.done(group, partition),
        id,
        group,
        attempt <= (data.fail ?? 0) ? '1' : '0',
        poison,
        head,
      );
    let verdict: number;
    for (;;) {
      try {
        verdict = await record();
        break;
      } catch (error) {
        // A full Redis refuses the record (its RPUSH, before anything was written): wait for room, as
        // for an outage, so a full Redis never fails an attempt the event did not ask to fail.
        if (!RedisFullError.isOutOfMemory(error)) throw error;
        await new Promise((resolve) => setTimeout(resolve, OUT_OF_MEMORY_WAIT_MS));
      }
    }
    if (verdict === POISONED && poison === 'non-retryable') throw new NonRetryableError(`fuzz: event ${data.n} is poison for ${group}`);
    if (verdict === POISONED) throw new Error(`fuzz: event ${data.n} is poison for ${group}`);
    if (verdict === TRANSIENT) throw new Error(`fuzz: event ${data.n} fails attempt ${attempt} of ${data.fail}`);
    if (verdict !== SUCCEEDS) throw new Error(`fuzz: unexpected verdict ${verdict}`);
  }

  onModuleDestroy(): void {
    this.redis.disconnect();
  }
}

@Injectable()
export class FuzzIdemHandlers {
  constructor(private readonly records: FuzzRecords) {}

  @OnEvent([EVENTS.fuzzBoth, EVENTS.fuzzFirst], { group: GROUPS.fuzzIdem, enableIdempotency: true, idempotencyTtlMs: FUZZ_MARK_TTL_MS })
  handle(message: EventrailMessage<FuzzData>): Promise<void> {
    return this.records.attempt(message);
  }
}

@Injectable()
export class FuzzPlainHandlers {
  constructor(private readonly records: FuzzRecords) {}

  @OnEvent(EVENTS.fuzzBoth, GROUPS.fuzzPlain)
  handle(message: EventrailMessage<FuzzData>): Promise<void> {
    return this.records.attempt(message);
  }
}

/** `fuzz-idem` as an older version of the service has it: without the `fuzz.first` handler. */
@Injectable()
export class OlderFuzzIdemHandlers {
  constructor(private readonly records: FuzzRecords) {}

  @OnEvent(EVENTS.fuzzBoth, { group: GROUPS.fuzzIdem, enableIdempotency: true, idempotencyTtlMs: FUZZ_MARK_TTL_MS })
  handle(message: EventrailMessage<FuzzData>): Promise<void> {
    return this.records.attempt(message);
  }
}

/** The providers of a fuzz worker running `groups` groups; `older`: the version whose `fuzz-idem` lacks `fuzz.first`. */
export function fuzzProviders(groups: number, older = false): Type[] {
  const idem = older ? OlderFuzzIdemHandlers : FuzzIdemHandlers;
  return groups >= 2 ? [FuzzRecords, idem, FuzzPlainHandlers] : [FuzzRecords, idem];
}
