import { encodeDeadLetter } from '../../lib/wire/dead-letter.codec';
import { describeError, describeThrown, errorStack } from '../../lib/util/describe-error';
import { seededRandom as random } from '../support/seeded-random';

const thrower = (what: string) => (): never => {
  throw new Error(what);
};

/** Anything a handler could throw, built from `rnd`: primitives, odd objects, Proxies with throwing traps, nested. */
function throwable(rnd: () => number, depth = 0): unknown {
  const pick = Math.floor(rnd() * 16);
  switch (pick) {
    case 0:
      return undefined;
    case 1:
      return null;
    case 2:
      return rnd() * 1e6;
    case 3:
      return Symbol(String(rnd()));
    case 4:
      return BigInt(Math.floor(rnd() * 1e9));
    case 5:
      return 'x'.repeat(Math.floor(rnd() * 20));
    case 6:
      return Object.create(null) as unknown;
    case 7: {
      const cyclic: Record<string, unknown> = { n: rnd() };
      cyclic.self = cyclic;
      return cyclic;
    }
    case 8:
      return { toString: thrower('toString'), toJSON: thrower('toJSON') };
    case 9:
      return Object.defineProperty(new Error('e'), 'message', { get: thrower('message') });
    case 10:
      return Object.defineProperty(new TypeError('t'), 'name', { get: thrower('name') });
    case 11:
      return Object.defineProperty(new Error('s'), 'stack', { get: thrower('stack') });
    case 12:
      return () => undefined;
    case 13:
      return Object.freeze({ inner: depth < 3 ? throwable(rnd, depth + 1) : 1 });
    default: {
      // A Proxy of something, with a random subset of traps that throw.
      const target = depth < 3 && rnd() < 0.5 ? throwable(rnd, depth + 1) : {};
      const handler: ProxyHandler<object> = {};
      if (rnd() < 0.5) handler.get = thrower('get');
      if (rnd() < 0.5) handler.getPrototypeOf = thrower('getPrototypeOf');
      if (rnd() < 0.5) handler.ownKeys = thrower('ownKeys');
      if (rnd() < 0.5) handler.getOwnPropertyDescriptor = thrower('getOwnPropertyDescriptor');
      if (rnd() < 0.5) handler.has = thrower('has');
      const proxied = typeof target === 'object' && target !== null ? target : typeof target === 'function' ? target : {};
      return new Proxy(proxied, handler);
    }
  }
}

describe('describeThrown', () => {
  it('never throws and always gives strings, for 5000 generated throwables', () => {
    for (let seed = 1; seed <= 5000; seed++) {
      const value = throwable(random(seed));
      let described: ReturnType<typeof describeThrown> | undefined;
      let fields: string[] | undefined;
      try {
        described = describeThrown(value);
        describeError(value);
        errorStack(value);
        fields = encodeDeadLetter(
          {
            group: 'g',
            partition: 0,
            entry: { offset: '1-0', fields: ['x', 'y'], reason: 'r', to: undefined },
            reason: 'retries-exhausted',
            error: value,
            attempts: 1,
            firstFailedAt: new Date(0),
            lastFailedAt: new Date(0),
          },
          'w',
        );
      } catch (error) {
        throw new Error(`seed ${seed}: ${String(error)}`, { cause: error });
      }
      expect(typeof described.name).toBe('string');
      expect(typeof described.message).toBe('string');
      expect(fields.every((f) => typeof f === 'string')).toBe(true);
    }
  });
});
