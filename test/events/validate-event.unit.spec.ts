import { InvalidEventDataError, InvalidEventNameError, InvalidHeadersError } from '../../lib';
import {
  MAX_DATA_DEPTH,
  MAX_HEADER_NAME_BYTES,
  MAX_HEADER_VALUE_BYTES,
  MAX_HEADERS,
  validateEventName,
  validateHeaders,
  validateJsonData,
} from '../../lib/events/validate-event';

const nested = (depth: number, wrap: (inner: unknown) => unknown): unknown => {
  let value: unknown = 1;
  for (let i = 0; i < depth; i++) value = wrap(value);
  return value;
};

describe('validateEventName', () => {
  it.each([
    ['', 'must not be empty'],
    ['x'.repeat(257), 'over 256'],
    ['bad\nname', 'control characters'],
    ['tab\there', 'control characters'],
    ['nul\u0000', 'control characters'],
  ])('refuses %j', (name, reason) => {
    expect(() => validateEventName(name)).toThrow(InvalidEventNameError);
    expect(() => validateEventName(name)).toThrow(reason);
  });

  it('refuses non-strings', () => {
    expect(() => validateEventName(42)).toThrow(InvalidEventNameError);
  });

  it('accepts dotted names and unicode', () => {
    expect(() => validateEventName('payment.completed')).not.toThrow();
    expect(() => validateEventName('zahlung.erhalten.ü')).not.toThrow();
  });
});

describe('validateJsonData', () => {
  class Money {
    amount = 1;
  }
  const cycle: Record<string, unknown> = { a: 1 };
  cycle.self = cycle;

  it.each<[string, unknown, string]>([
    ['undefined', undefined, 'data is undefined'],
    ['a nested undefined', { a: { b: undefined } }, 'data.a.b is undefined'],
    ['a function', { f: () => 1 }, 'data.f is a function'],
    ['a symbol', { s: Symbol('x') }, 'data.s is a symbol'],
    ['a BigInt', { n: [1, 2n] }, 'data.n[1] is a BigInt'],
    ['NaN', { x: NaN }, 'data.x is NaN'],
    ['Infinity', [Infinity], 'data[0] is Infinity'],
    ['a cycle', cycle, 'data.self is a circular reference'],
    ['a Date', { when: new Date() }, 'data.when is an instance of Date'],
    ['a Map', { m: new Map() }, 'data.m is an instance of Map'],
    ['a class instance', { money: new Money() }, 'data.money is an instance of Money'],
    // eslint-disable-next-line no-sparse-arrays
    ['a sparse array', { list: [1, , 3] }, 'data.list[1] is a hole'],
    ['an odd key', { 'a b': undefined }, 'data["a b"] is undefined'],
  ])('refuses %s and names the path', (_, value, message) => {
    expect(() => validateJsonData('e', value)).toThrow(InvalidEventDataError);
    expect(() => validateJsonData('e', value)).toThrow(message);
  });

  it.each<[string, (inner: unknown) => unknown]>([
    ['arrays', (inner) => [inner]],
    ['objects', (inner) => ({ a: inner })],
    ['arrays and objects', (inner) => (Array.isArray(inner) ? { a: inner } : [inner])],
  ])('refuses %s nested deeper than the limit (even 100000 deep) with a typed error, not a stack overflow', (_, wrap) => {
    for (const depth of [MAX_DATA_DEPTH + 1, 100_000]) {
      const value = nested(depth, wrap);
      expect(() => validateJsonData('e', value)).toThrow(InvalidEventDataError);
      expect(() => validateJsonData('e', value)).toThrow(`nests more than ${MAX_DATA_DEPTH} levels`);
    }
    expect(() => validateJsonData('e', nested(MAX_DATA_DEPTH, wrap))).not.toThrow();
    expect(() => JSON.stringify(nested(MAX_DATA_DEPTH, wrap))).not.toThrow();
  });

  it('refuses data whose getters or proxy traps throw with a typed error', () => {
    const getter = Object.defineProperty({}, 'x', {
      enumerable: true,
      get: () => {
        throw new Error('boom');
      },
    });
    const proxy = new Proxy(
      {},
      {
        ownKeys: () => {
          throw new TypeError('no keys');
        },
      },
    );
    expect(() => validateJsonData('e', { a: getter })).toThrow(InvalidEventDataError);
    expect(() => validateJsonData('e', { a: getter })).toThrow('data cannot be read (boom)');
    expect(() => validateJsonData('e', [proxy])).toThrow(InvalidEventDataError);
  });

  it('walks data checked from inside another walk (a getter that publishes) on its own, and then the outer data to the end', () => {
    const inner: Record<string, unknown> = { list: [1, { deep: [2] }] };
    const outer: Record<string, unknown> = {
      get first() {
        validateJsonData('inner', inner);
        expect(() => validateJsonData('inner', { self: inner, bad: NaN })).toThrow(InvalidEventDataError);
        return 1;
      },
      then: { back: undefined as unknown },
    };
    (outer.then as Record<string, unknown>).back = outer;
    expect(() => validateJsonData('outer', outer)).toThrow(/data\.then\.back.*circular/);
    // And afterwards as before: what passes passes, what loops is refused.
    expect(() => validateJsonData('after', inner)).not.toThrow();
    inner.loop = inner;
    expect(() => validateJsonData('after', inner)).toThrow(/data\.loop.*circular/);
  });

  it('accepts plain JSON, including shared (non-cyclic) references', () => {
    const shared = { x: 1 };
    const data = { a: [1, 'two', true, null, { b: shared }], c: shared, d: Object.create(null) as object, e: -0.5 };
    expect(() => validateJsonData('e', data)).not.toThrow();
    expect(() => validateJsonData('e', null)).not.toThrow();
    expect(() => validateJsonData('e', 'text')).not.toThrow();
  });
});

describe('validateHeaders', () => {
  it('refuses non-string values and non-objects', () => {
    expect(() => validateHeaders('e', { traceparent: 1 })).toThrow(InvalidHeadersError);
    expect(() => validateHeaders('e', { traceparent: 1 })).toThrow('header "traceparent" has a number value');
    expect(() => validateHeaders('e', ['a'])).toThrow(InvalidHeadersError);
    expect(() => validateHeaders('e', null)).toThrow(InvalidHeadersError);
    expect(() => validateHeaders('e', new Map([['a', 'b']]))).toThrow('is not a plain object');
  });

  it.each<[string, Record<string, unknown>, string]>([
    [
      'too many headers',
      Object.fromEntries(Array.from({ length: MAX_HEADERS + 1 }, (_, i) => [`h${i}`, 'v'])),
      `header "h64" is one of 65 headers, over 64`,
    ],
    ['an empty name', { '': 'v' }, 'header "" has an empty name'],
    ['a long name', { ['n'.repeat(MAX_HEADER_NAME_BYTES + 1)]: 'v' }, `header "${'n'.repeat(64)}"... has a name of 257 bytes, over 256`],
    ['a name long in UTF-8 bytes', { ['é'.repeat(129)]: 'v' }, 'has a name of 258 bytes, over 256'],
    ['a newline in a name', { 'x-a\nb': 'v' }, 'header "x-a\\nb" has control characters in its name'],
    ['a NUL in a name', { 'a\u0000': 'v' }, 'has control characters in its name'],
    ['a DEL in a name', { 'a\u007f': 'v' }, 'has control characters in its name'],
    ['a long value', { tracestate: 'v'.repeat(MAX_HEADER_VALUE_BYTES + 1) }, 'header "tracestate" has a value of 8193 bytes, over 8192'],
    ['a value long in UTF-8 bytes', { t: '€'.repeat(2731) }, 'header "t" has a value of 8193 bytes, over 8192'],
    ['an undefined value', { t: undefined }, 'header "t" has a undefined value'],
  ])('refuses %s, naming the header', (_, headers, message) => {
    expect(() => validateHeaders('e', headers)).toThrow(InvalidHeadersError);
    expect(() => validateHeaders('e', headers)).toThrow(message);
  });

  // Was broken: a non-enumerable toJSON passed every check and JSON.stringify wrote its answer as the headers
  // (a 100 002-byte string stored, past the 8 KiB value limit).
  it('refuses headers with a toJSON, own and hidden or inherited, which JSON would write instead of them', () => {
    const big = (): string => 'x'.repeat(100_000);
    const hidden = Object.defineProperty({ a: 'b' }, 'toJSON', { value: big });
    const inherited = Object.create(Object.create(null, { toJSON: { value: big } }) as object) as Record<string, string>;
    for (const headers of [hidden, inherited]) {
      expect(() => validateHeaders('e', headers)).toThrow(InvalidHeadersError);
    }
    expect(() => validateHeaders('e', hidden)).toThrow('has a toJSON');
  });

  it('accepts headers up to every limit', () => {
    const headers = Object.fromEntries(
      Array.from({ length: MAX_HEADERS }, (_, i) => [`${i}`.padEnd(MAX_HEADER_NAME_BYTES, 'n'), 'v'.repeat(MAX_HEADER_VALUE_BYTES)]),
    );
    expect(() => validateHeaders('e', headers)).not.toThrow();
    expect(() => validateHeaders('e', { ['é'.repeat(128)]: '€'.repeat(2730) })).not.toThrow();
    expect(() => validateHeaders('e', Object.assign(Object.create(null) as object, { a: 'b' }))).not.toThrow();
  });

  it('accepts string maps', () => {
    expect(() => validateHeaders('e', { traceparent: '00-abc-def-01' })).not.toThrow();
  });
});
