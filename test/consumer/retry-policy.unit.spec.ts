import { DEFAULT_CONSUMER_OPTIONS, InvalidOptionError, NonRetryableError } from '../../lib';
import { resolveConsumerOptions } from '../../lib/consumer/consumer.options';
import { retryVerdict, type RetryLimits } from '../../lib/consumer/handling/retry-policy';

const NO_JITTER = (): number => 1; // the full exponential delay
const limits = (overrides: Partial<RetryLimits>): RetryLimits => ({
  maxRetries: 5,
  maxRetryAgeMs: 0,
  retryBackoffMs: 100,
  retryBackoffMaxMs: 1_000,
  ...overrides,
});

describe('retryVerdict', () => {
  it('retries with the capped backoff up to maxRetries when there is no time budget', () => {
    const delays = [1, 2, 3, 4, 5].map((attempt) => retryVerdict(limits({}), attempt, new Error('x'), 0, 0, NO_JITTER));
    expect(delays).toEqual([{ retryInMs: 100 }, { retryInMs: 200 }, { retryInMs: 400 }, { retryInMs: 800 }, { retryInMs: 1_000 }]);
    expect(retryVerdict(limits({}), 6, new Error('x'), 0, 0)).toEqual({ giveUp: 'retries-exhausted' });
  });

  it('gives a NonRetryableError up at once, whatever the budget', () => {
    expect(retryVerdict(limits({ maxRetryAgeMs: 60_000 }), 1, new NonRetryableError('no'), 0, 0)).toEqual({ giveUp: 'non-retryable' });
  });

  it('retries by time until the message has been failing for maxRetryAgeMs, the last wait ending at the limit', () => {
    const byTime = limits({ maxRetries: Number.POSITIVE_INFINITY, maxRetryAgeMs: 10_000 });
    expect(retryVerdict(byTime, 500, new Error('x'), 0, 5_000, NO_JITTER)).toEqual({ retryInMs: 1_000 });
    expect(retryVerdict(byTime, 500, new Error('x'), 0, 9_700, NO_JITTER)).toEqual({ retryInMs: 300 });
    expect(retryVerdict(byTime, 500, new Error('x'), 0, 10_000, NO_JITTER)).toEqual({ giveUp: 'retries-exhausted' });
  });

  it('stops at whichever limit comes first when both are set', () => {
    const both = limits({ maxRetries: 2, maxRetryAgeMs: 60_000 });
    expect(retryVerdict(both, 3, new Error('x'), 0, 10)).toEqual({ giveUp: 'retries-exhausted' });
    const short = limits({ maxRetries: 100, maxRetryAgeMs: 50 });
    expect(retryVerdict(short, 2, new Error('x'), 0, 60)).toEqual({ giveUp: 'retries-exhausted' });
  });
});

describe('retry defaults by ordering', () => {
  it("default to 'key': two quick tiers from 200 ms doubling to 2 s, no time budget", () => {
    expect(DEFAULT_CONSUMER_OPTIONS).toMatchObject({
      ordering: 'key',
      maxRetries: 2,
      retryBackoffMs: 200,
      retryBackoffMaxMs: 2_000,
      maxRetryAgeMs: 0,
      redelivery: { maxAgeMs: 3_600_000 },
    });
  });

  it("with 'partition', retry in place 5 times from 1 s doubling to 30 s, as eventrail did", () => {
    expect(resolveConsumerOptions('consumer', { ordering: 'partition' }, DEFAULT_CONSUMER_OPTIONS)).toMatchObject({
      maxRetries: 5,
      retryBackoffMs: 1_000,
      retryBackoffMaxMs: 30_000,
      maxRetryAgeMs: 0,
    });
    // A group that goes back to 'key' over a 'partition' module gets the quick tiers again.
    const partition = resolveConsumerOptions('consumer', { ordering: 'partition' }, DEFAULT_CONSUMER_OPTIONS);
    expect(resolveConsumerOptions('groups.g', { ordering: 'key' }, partition)).toMatchObject({
      maxRetries: 2,
      retryBackoffMs: 200,
      retryBackoffMaxMs: 2_000,
    });
  });

  it('keep a value set by the user whatever the ordering', () => {
    const set = resolveConsumerOptions('consumer', { maxRetries: 7, retryBackoffMs: 50 }, DEFAULT_CONSUMER_OPTIONS);
    expect(resolveConsumerOptions('groups.g', { ordering: 'partition' }, set)).toMatchObject({
      maxRetries: 7,
      retryBackoffMs: 50,
      retryBackoffMaxMs: 30_000,
    });
  });
});

describe('maxRetryAgeMs resolution', () => {
  it('is off by default: count-based retries as before', () => {
    expect(DEFAULT_CONSUMER_OPTIONS).toMatchObject({ maxRetryAgeMs: 0 });
    expect(resolveConsumerOptions('consumer', { ordering: 'partition' }, DEFAULT_CONSUMER_OPTIONS)).toMatchObject({
      maxRetries: 5,
      maxRetryAgeMs: 0,
    });
  });

  it("given without maxRetries next to it, lifts the count limit with 'partition'", () => {
    const resolved = resolveConsumerOptions('consumer', { ordering: 'partition', maxRetryAgeMs: 3_600_000 }, DEFAULT_CONSUMER_OPTIONS);
    expect(resolved).toMatchObject({ maxRetryAgeMs: 3_600_000, maxRetries: Number.POSITIVE_INFINITY });
    // A more specific level inherits both, or sets a count of its own.
    expect(resolveConsumerOptions('groups.g', { concurrency: 2 }, resolved).maxRetries).toBe(Number.POSITIVE_INFINITY);
    expect(resolveConsumerOptions('groups.g', { maxRetries: 3 }, resolved)).toMatchObject({ maxRetries: 3, maxRetryAgeMs: 3_600_000 });
  });

  it("given with maxRetries, keeps both limits with 'partition'", () => {
    expect(
      resolveConsumerOptions('consumer', { ordering: 'partition', maxRetryAgeMs: 60_000, maxRetries: 8 }, DEFAULT_CONSUMER_OPTIONS),
    ).toMatchObject({ maxRetries: 8, maxRetryAgeMs: 60_000 });
  });

  it("with 'key', keeps the quick tiers' count and sets how long a parked message may fail", () => {
    expect(resolveConsumerOptions('consumer', { maxRetryAgeMs: 600_000 }, DEFAULT_CONSUMER_OPTIONS)).toMatchObject({
      ordering: 'key',
      maxRetries: 2,
      maxRetryAgeMs: 600_000,
      redelivery: { maxAgeMs: 600_000 },
    });
    expect(resolveConsumerOptions('consumer', { maxRetryAgeMs: 600_000, maxRetries: 4 }, DEFAULT_CONSUMER_OPTIONS)).toMatchObject({
      maxRetries: 4,
      redelivery: { maxAgeMs: 600_000 },
    });
  });

  it("with 'key', leaves redelivery.maxAgeMs alone when it is set next to it", () => {
    const resolved = resolveConsumerOptions(
      'consumer',
      { maxRetryAgeMs: 600_000, redelivery: { maxAgeMs: 120_000 } },
      DEFAULT_CONSUMER_OPTIONS,
    );
    expect(resolved).toMatchObject({ maxRetries: 2, maxRetryAgeMs: 600_000, redelivery: { maxAgeMs: 120_000 } });
  });

  it('a time budget set module-wide follows each group to its own ordering', () => {
    const consumer = resolveConsumerOptions('consumer', { maxRetryAgeMs: 3_600_000 }, DEFAULT_CONSUMER_OPTIONS);
    // Under 'partition' the lifted count applies again: retry by time alone, for the hour.
    expect(resolveConsumerOptions('groups.ledger', { ordering: 'partition' }, consumer)).toMatchObject({
      maxRetries: Number.POSITIVE_INFINITY,
      maxRetryAgeMs: 3_600_000,
      retryBackoffMs: 1_000,
    });
    const partition = resolveConsumerOptions('consumer', { ordering: 'partition', maxRetryAgeMs: 600_000 }, DEFAULT_CONSUMER_OPTIONS);
    expect(resolveConsumerOptions('groups.orders', { ordering: 'key' }, partition)).toMatchObject({
      maxRetries: 2,
      redelivery: { maxAgeMs: 600_000 },
    });
    // A count or a parked budget set more specifically wins.
    expect(resolveConsumerOptions('groups.ledger', { ordering: 'partition', maxRetries: 3 }, consumer).maxRetries).toBe(3);
    expect(resolveConsumerOptions('groups.orders', { redelivery: { maxAgeMs: 60_000 } }, partition).redelivery.maxAgeMs).toBe(60_000);
  });

  it('refuses a value that is not a whole number of milliseconds, naming the option', () => {
    expect(() => resolveConsumerOptions('groups.ledger', { maxRetryAgeMs: -1 }, DEFAULT_CONSUMER_OPTIONS)).toThrow(InvalidOptionError);
    expect(() => resolveConsumerOptions('groups.ledger', { maxRetryAgeMs: 1.5 }, DEFAULT_CONSUMER_OPTIONS)).toThrow(
      /groups\.ledger\.maxRetryAgeMs/,
    );
    expect(() => resolveConsumerOptions('consumer', { maxRetries: Number.POSITIVE_INFINITY }, DEFAULT_CONSUMER_OPTIONS)).toThrow(
      /consumer\.maxRetries/,
    );
  });
});
