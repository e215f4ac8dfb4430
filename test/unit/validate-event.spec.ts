import { InvalidEventDataError, InvalidEventNameError, InvalidHeadersError } from '../../lib';
import { validateEventName, validateHeaders, validateJsonData } from '../../lib/log/validate-event';

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
  });

  it('accepts string maps', () => {
    expect(() => validateHeaders('e', { traceparent: '00-abc-def-01' })).not.toThrow();
  });
});
