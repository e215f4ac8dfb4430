import type { StandardSchemaV1 } from '@standard-schema/spec';
import { z } from 'zod';
import {
  defineEvent,
  EventData,
  EventInput,
  EventrailError,
  EventrailMessage,
  EventrailPublisher,
  EventValidationError,
  InvalidEventNameError,
  InvalidEventSchemaError,
  isEventDefinition,
  OnEvent,
} from '../../lib';
import { checkAgainstSchema, formatPath } from '../../lib/events/schema-check';
import { publishedEventName, publishedEventNames } from '../../lib/events/published-event';

const PaymentCompleted = defineEvent(
  'payment.completed',
  z.object({
    paymentId: z.string(),
    amount: z.number(),
    // A transform: the wire carries a string, handlers get a Date.
    at: z.string().transform((text) => new Date(text)),
  }),
);

/** A hand-written Standard Schema whose validate is asynchronous, as a remote or async-refined schema is. */
function asyncSchema<T>(accept: (value: unknown) => value is T): StandardSchemaV1<T> {
  return {
    '~standard': {
      version: 1,
      vendor: 'test',
      validate: (value) => Promise.resolve(accept(value) ? { value } : { issues: [{ message: 'rejected', path: ['n'] }] }),
    },
  };
}

describe('defineEvent', () => {
  it('names the event and keeps the schema', () => {
    expect(PaymentCompleted.name).toBe('payment.completed');
    expect(isEventDefinition(PaymentCompleted)).toBe(true);
    expect(isEventDefinition({ name: 'payment.completed', schema: undefined })).toBe(false);
    expect(isEventDefinition('payment.completed')).toBe(false);
    expect(defineEvent('ping').schema).toBeUndefined();
    expect(Object.isFrozen(PaymentCompleted)).toBe(true);
  });

  it('refuses a bad name or something that is not a Standard Schema, with typed errors', () => {
    expect(() => defineEvent('')).toThrow(InvalidEventNameError);
    expect(() => defineEvent('x', { parse: () => 1 } as never)).toThrow(InvalidEventSchemaError);
    expect(() => defineEvent('x', { parse: () => 1 } as never)).toThrow(/defineEvent\("x"\): the schema is not a Standard Schema/);
    expect(new InvalidEventSchemaError('x')).toBeInstanceOf(EventrailError);
  });
});

describe('schema checks', () => {
  it('lists every issue by path', () => {
    const outcome = checkAgainstSchema(PaymentCompleted.schema, { paymentId: 7, amount: '12', at: '2026-01-01' });
    expect(outcome).toEqual({
      issues: [
        { path: 'paymentId', message: 'Invalid input: expected string, received number' },
        { path: 'amount', message: 'Invalid input: expected number, received string' },
      ],
    });
  });

  it("gives the schema's output, transforms applied", () => {
    const outcome = checkAgainstSchema(PaymentCompleted.schema, { paymentId: 'p1', amount: 12, at: '2026-01-01T00:00:00.000Z' });
    expect(outcome).toEqual({ value: { paymentId: 'p1', amount: 12, at: new Date('2026-01-01T00:00:00.000Z') } });
  });

  it('spells out paths: indexes, nested keys, odd keys, segments given as objects, the root', () => {
    expect(formatPath(['items', 2, 'sku'])).toBe('items[2].sku');
    expect(formatPath([{ key: 'a' }, { key: 0 }])).toBe('a[0]');
    expect(formatPath(['a b', 'c'])).toBe('["a b"].c');
    expect(formatPath([])).toBe('(root)');
    expect(formatPath(undefined)).toBe('(root)');
  });

  it('works with asynchronous schemas, and a schema that throws or rejects counts as a failed check', async () => {
    const schema = asyncSchema((v): v is { n: number } => typeof (v as { n?: unknown })?.n === 'number');
    const pending = checkAgainstSchema(schema, { n: 1 });
    expect(pending).toBeInstanceOf(Promise);
    await expect(pending).resolves.toEqual({ value: { n: 1 } });
    await expect(checkAgainstSchema(schema, { n: 'x' })).resolves.toEqual({ issues: [{ path: 'n', message: 'rejected' }] });

    const throwing: StandardSchemaV1 = {
      '~standard': {
        version: 1,
        vendor: 'test',
        validate: () => {
          throw new RangeError('boom');
        },
      },
    };
    expect(checkAgainstSchema(throwing, 1)).toEqual({ issues: [{ path: '(root)', message: 'the schema threw RangeError: boom' }] });
    const garbage: StandardSchemaV1 = { '~standard': { version: 1, vendor: 'test', validate: () => null as never } };
    expect(checkAgainstSchema(garbage, 1)).toEqual({
      issues: [{ path: '(root)', message: expect.stringMatching(/^the schema threw TypeError: /) }],
    });
    const rejecting: StandardSchemaV1 = { '~standard': { version: 1, vendor: 'test', validate: () => Promise.reject(new Error('down')) } };
    await expect(checkAgainstSchema(rejecting, 1)).resolves.toEqual({
      issues: [{ path: '(root)', message: 'the schema threw Error: down' }],
    });
  });
});

describe('the publish-side check', () => {
  it('passes names through and refuses data that fails, naming the event and the issues', () => {
    expect(publishedEventName('any.name', { whatever: true })).toBe('any.name');
    expect(publishedEventName(PaymentCompleted, { paymentId: 'p', amount: 1, at: 'now' })).toBe('payment.completed');
    let caught: unknown;
    try {
      void publishedEventName(PaymentCompleted, { paymentId: 'p', amount: 'one', at: 'now' });
    } catch (error) {
      caught = error;
    }
    expect(caught).toBeInstanceOf(EventValidationError);
    expect(caught).toBeInstanceOf(EventrailError);
    expect((caught as EventValidationError).message).toBe(
      'Event "payment.completed": data does not match the event\'s schema: amount: Invalid input: expected number, received string',
    );
    expect((caught as EventValidationError).issues).toEqual([
      { path: 'amount', message: 'Invalid input: expected number, received string' },
    ]);
  });

  it('in a batch, names the lowest failing index whatever order asynchronous checks finish in', async () => {
    const Slow = defineEvent(
      'slow',
      asyncSchema((v): v is { n: number } => typeof (v as { n?: unknown })?.n === 'number'),
    );
    const ok = { paymentId: 'p', amount: 1, at: 'now' };
    expect(
      publishedEventNames([
        { event: 'a', data: 1 },
        { event: PaymentCompleted, data: ok },
      ]),
    ).toEqual(['a', 'payment.completed']);
    await expect(
      publishedEventNames([
        { event: 'a', data: 1 },
        { event: Slow, data: { n: 1 } },
      ]),
    ).resolves.toEqual(['a', 'slow']);
    const refused = publishedEventNames([
      { event: Slow, data: { n: 1 } },
      { event: Slow, data: { n: 'late' } },
      { event: PaymentCompleted, data: { ...ok, amount: 'sync and later in the batch' } },
    ]);
    await expect(refused).rejects.toMatchObject({ name: 'EventValidationError', index: 1, eventName: 'slow' });
    await expect(
      Promise.resolve(
        publishedEventNames([
          { event: Slow, data: { n: 1 } },
          { event: PaymentCompleted, data: { ...ok, amount: 'x' } },
        ]),
      ),
    ).rejects.toThrow(/^events\[1\] \("payment.completed"\): data does not match/);
  });
});

// Type tests: tsc --noEmit covers test/ (tsconfig.json), so each @ts-expect-error below must be an error,
// and everything else must compile. The functions are never called.
export function typeChecks(publisher: EventrailPublisher): void {
  void publisher.publish(PaymentCompleted, { paymentId: 'p', amount: 1, at: '2026-01-01' });
  // @ts-expect-error amount must be a number
  void publisher.publish(PaymentCompleted, { paymentId: 'p', amount: '1', at: '2026-01-01' });
  // @ts-expect-error paymentId is missing
  void publisher.publish(PaymentCompleted, { amount: 1, at: '2026-01-01' });
  // @ts-expect-error the input of `at` is the string the transform takes, not its Date output
  void publisher.publish(PaymentCompleted, { paymentId: 'p', amount: 1, at: new Date() });
  // String names keep taking anything.
  void publisher.publish('payment.completed', { anything: true });
  void publisher.publishMany([{ event: PaymentCompleted, data: { paymentId: 'p', amount: 1, at: 'x' } }]);
  // @ts-expect-error in a batch too, the data is typed by the definition's schema
  void publisher.publishMany([{ event: PaymentCompleted, data: { paymentId: 'p', amount: '1', at: 'x' }, key: 'k' }]);
  void publisher.publishMany([
    { event: PaymentCompleted, data: { paymentId: 'p', amount: 1, at: 'x' } },
    { event: 'note', data: { text: 'names take anything' } },
  ]);

  const data: EventData<typeof PaymentCompleted> = { paymentId: 'p', amount: 1, at: new Date() };
  // @ts-expect-error a handler gets the output: `at` is a Date
  const wrong: EventData<typeof PaymentCompleted> = { paymentId: 'p', amount: 1, at: '2026-01-01' };
  const input: EventInput<typeof PaymentCompleted> = { paymentId: 'p', amount: 1, at: '2026-01-01' };
  const untyped: EventData<ReturnType<typeof defineEvent<'ping'>>> = 'anything';
  void [data, wrong, input, untyped];

  class Handlers {
    @OnEvent(PaymentCompleted, 'mailer')
    mail(message: EventrailMessage<EventData<typeof PaymentCompleted>>): number {
      return message.data.at.getTime() + message.data.amount;
    }

    @OnEvent([PaymentCompleted, 'payment.refunded'], { group: 'ledger', concurrency: 2 })
    book(): void {}

    // @ts-expect-error not an event name or a definition
    @OnEvent(42, 'ledger')
    broken(): void {}
  }
  void Handlers;
}
