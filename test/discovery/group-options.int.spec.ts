import { Injectable } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import Redis from 'ioredis';
import { ConsumerOptions, EventrailConsumers, EventrailModule, InvalidHandlerError, OnEvent, OnEventGroupOptions } from '../../lib';
import { CONSUMER_OPTION_NAMES } from '../../lib/consumer/consumer.options';
import type { GroupPlan } from '../../lib/consumer/handling/group-plan';
import { deletePrefix, testRedisUrl, uniquePrefix } from '../support/helpers';

/**
 * Two valid values of every consumer option, each built fresh on every call so that "the same value" is never
 * the same object. Typed over every key of `ConsumerOptions`: a new option does not compile until it is here.
 */
const TWO_VALUES: { [K in keyof Required<ConsumerOptions>]: () => [ConsumerOptions[K], ConsumerOptions[K]] } = {
  concurrency: () => [2, 3],
  batchSize: () => [50, 60],
  packedBacklogReads: () => [true, false],
  maxReadBytes: () => [1_048_576, 2_097_152],
  lockTtlMs: () => [11_000, 12_000],
  heartbeatTtlMs: () => [13_000, 14_000],
  shutdownTimeoutMs: () => [1_500, 2_500],
  // Apart only by one millisecond of a Date inside: the comparison looks into values, not at references.
  initialOffset: () => [
    { mode: 'fromTime', time: new Date(1_700_000_000_000) },
    { mode: 'fromTime', time: new Date(1_700_000_000_001) },
  ],
  maxRetries: () => [7, 8],
  maxRetryAgeMs: () => [61_000, 62_000],
  retryBackoffMs: () => [110, 120],
  retryBackoffMaxMs: () => [5_100, 5_200],
  maxDeliveries: () => [4, 6],
  handlerTimeoutMs: () => [1_100, 1_200],
  enableIdempotency: () => [true, false],
  idempotencyTtlMs: () => [71_000, 72_000],
  ordering: () => ['key', 'unordered'],
  redelivery: () => [
    { delayMs: 1_000, factor: 2, maxDelayMs: 300_000, maxAgeMs: 3_600_000 },
    { delayMs: 1_001, factor: 2, maxDelayMs: 300_000, maxAgeMs: 3_600_000 },
  ],
};

type Method = { method: string; event: string; options?: Omit<OnEventGroupOptions, 'group'>; group?: string };

/** An injectable class named `name` whose methods carry `@OnEvent` in the order given (group "g" unless said). */
function provider(name: string, methods: Method[]): new () => object {
  const cls = { [name]: class {} }[name];
  for (const { method, event, options, group } of methods) {
    Object.defineProperty(cls.prototype, method, { value: function handle(): void {}, writable: true, configurable: true });
    OnEvent(event, { group: group ?? 'g', ...options })(cls.prototype, method, Object.getOwnPropertyDescriptor(cls.prototype, method)!);
  }
  Injectable()(cls);
  return cls;
}

const prefixes: string[] = [];

/** Starts (without consuming) and closes an app with `providers`: the plans handed to the consumers, or the startup error. */
async function boot(providers: Array<new () => object>): Promise<{ plans: GroupPlan[]; error?: unknown }> {
  const register = jest.spyOn(EventrailConsumers.prototype, 'register');
  const prefix = uniquePrefix('group-options');
  prefixes.push(prefix);
  try {
    const moduleRef = await Test.createTestingModule({
      imports: [EventrailModule.forRoot({ redis: testRedisUrl(), prefix, autoStart: false })],
      providers,
    }).compile();
    const app = await moduleRef.init();
    await app.close();
    return { plans: register.mock.calls.map(([plan]) => plan) };
  } catch (error) {
    return { plans: [], error };
  } finally {
    register.mockRestore();
  }
}

/** The message names both methods and the option, each value next to its method (in either order). */
function expectClash(error: unknown, option: string, a: [string, unknown], b: [string, unknown]): void {
  expect(error).toBeInstanceOf(InvalidHandlerError);
  const message = (error as Error).message;
  const show = (value: unknown): string => JSON.stringify(value);
  const forms = [
    `@OnEvent on ${a[0]}: "${option}" of group "g" is ${show(a[1])} here and ${show(b[1])} in ${b[0]}`,
    `@OnEvent on ${b[0]}: "${option}" of group "g" is ${show(b[1])} here and ${show(a[1])} in ${a[0]}`,
  ];
  expect(forms.some((form) => message.startsWith(form))).toBe(true);
}

function groupOptions(plans: GroupPlan[], group = 'g'): GroupPlan['options'] {
  const plan = plans.find((p) => p.group === group);
  expect(plan).toBeDefined();
  return plan!.options;
}

afterAll(async () => {
  const redis = new Redis(testRedisUrl());
  for (const prefix of prefixes) await deletePrefix(redis, prefix);
  await redis.quit();
});

describe('@OnEvent options that apply to the whole group', () => {
  it('covers every consumer option', () => {
    expect(Object.keys(TWO_VALUES).sort()).toEqual([...CONSUMER_OPTION_NAMES].sort());
  });

  describe.each([...CONSUMER_OPTION_NAMES])('%s', (option) => {
    const values = (): [unknown, unknown] => TWO_VALUES[option]() as [unknown, unknown];
    const set = (value: unknown): Method['options'] => ({ [option]: value });

    it('set differently by two methods of one provider: startup fails naming both and the values', async () => {
      const [a, b] = values();
      const Both = provider('Both', [
        { method: 'first', event: 'e1', options: set(a) },
        { method: 'second', event: 'e2', options: set(b) },
      ]);
      const { error } = await boot([Both]);
      expectClash(error, option, ['Both.first', a], ['Both.second', b]);
    });

    it('set differently by methods of two providers: startup fails naming both and the values', async () => {
      const [a, b] = values();
      const One = provider('One', [{ method: 'handle', event: 'e1', options: set(a) }]);
      const Other = provider('Other', [{ method: 'handle', event: 'e2', options: set(b) }]);
      const { error } = await boot([One, Other]);
      expectClash(error, option, ['One.handle', a], ['Other.handle', b]);
    });

    it('set to the same value by two methods: accepted, and the group has it', async () => {
      const [first, again] = [values()[0], values()[0]];
      const One = provider('One', [{ method: 'handle', event: 'e1', options: set(first) }]);
      const Other = provider('Other', [{ method: 'handle', event: 'e2', options: set(again) }]);
      const { plans, error } = await boot([One, Other]);
      expect(error).toBeUndefined();
      expect(groupOptions(plans)[option]).toEqual(first);
    });

    it('set by one method and left unset by the others (before and after it): the set value applies to the group', async () => {
      const [, b] = values();
      const Quiet = provider('Quiet', [{ method: 'handle', event: 'e0' }]);
      const Mixed = provider('Mixed', [
        { method: 'before', event: 'e1', options: { concurrency: undefined } },
        { method: 'setting', event: 'e2', options: set(b) },
        { method: 'after', event: 'e3' },
      ]);
      const { plans, error } = await boot([Quiet, Mixed]);
      expect(error).toBeUndefined();
      expect(groupOptions(plans)[option]).toEqual(b);
    });

    it('set differently in two groups: each group has its own', async () => {
      const [a, b] = values();
      const Two = provider('Two', [
        { method: 'inG', event: 'e1', options: set(a) },
        { method: 'inH', event: 'e1', options: set(b), group: 'h' },
      ]);
      const { plans, error } = await boot([Two]);
      expect(error).toBeUndefined();
      expect(groupOptions(plans, 'g')[option]).toEqual(a);
      expect(groupOptions(plans, 'h')[option]).toEqual(b);
    });
  });

  it('the other methods agree on what they left unset: a time budget from one and a count from another hold in either order', async () => {
    for (const order of [
      ['age', 'count'],
      ['count', 'age'],
    ]) {
      const written: Record<string, Method> = {
        age: { method: 'age', event: 'e1', options: { maxRetryAgeMs: 60_000 } },
        count: { method: 'count', event: 'e2', options: { maxRetries: 3 } },
      };
      const Retries = provider(
        'Retries',
        order.map((key) => written[key]),
      );
      const { plans, error } = await boot([Retries]);
      expect(error).toBeUndefined();
      expect(groupOptions(plans)).toMatchObject({ maxRetryAgeMs: 60_000, maxRetries: 3 });
    }
  });

  it('batch is per method: two batch handlers of one group may size their batches differently', async () => {
    const Batches = provider('Batches', [
      { method: 'small', event: 'e1', options: { batch: { maxSize: 5, maxWaitMs: 10 } } },
      { method: 'large', event: 'e2', options: { batch: { maxSize: 50 } } },
    ]);
    const { plans, error } = await boot([Batches]);
    expect(error).toBeUndefined();
    const handlers = plans.find((p) => p.group === 'g')!.handlers;
    expect(handlers.get('e1')![0].batch).toMatchObject({ name: 'Batches.small', maxSize: 5, maxWaitMs: 10 });
    expect(handlers.get('e2')![0].batch).toMatchObject({ name: 'Batches.large', maxSize: 50, maxWaitMs: 0 });
  });
});
