import { jsonBytesBound } from '../../lib/events/validate-event';
import { seededRandom } from '../support/seeded-random';

/**
 * `jsonBytesBound` lets `publishMany` leave an event's data unserialised until its run is built, so
 * a bound under the JSON's real size would let an event over `maxPayloadBytes` be refused only after
 * earlier runs left. The property: for any data the walk accepts, the bound is at least the UTF-8
 * bytes of `JSON.stringify(data)`, or Infinity (cannot say).
 */

type Random = () => number;
const int = (random: Random, max: number): number => Math.floor(random() * max);
const pick = <T>(random: Random, list: readonly T[]): T => list[int(random, list.length)];

const bits = new DataView(new ArrayBuffer(8));
/** Any finite double, from random bits: subnormals, huge exponents, negative zero, 17-digit mantissas. */
function anyNumber(random: Random): number {
  for (;;) {
    bits.setUint32(0, int(random, 2 ** 32));
    bits.setUint32(4, int(random, 2 ** 32));
    const value = bits.getFloat64(0);
    if (Number.isFinite(value)) return value;
  }
}

/** The numbers whose JSON text is longest or oddest. */
const NUMBERS = [
  -0,
  0,
  1e21,
  -1e21,
  1e-7,
  -Math.PI / 1e7,
  -Math.E / 1e6,
  5e-324,
  -5e-324,
  Number.MAX_VALUE,
  -Number.MAX_VALUE,
  Number.MIN_VALUE,
  -0.0000012345678901234567,
  -123456789012345680000,
  2 ** 53 + 2,
  -(2 ** 31),
];

/** UTF-16 units JSON writes longest: controls (\u00XX), lone surrogates (\udXXX), quotes and backslashes, then 2- and 3-byte units and astral pairs. */
const UNITS = ['\u0000', '\u0001', '\u001f', '\ud800', '\udfff', '"', '\\', '\n', '\u007f', '\u2028', 'é', '€', '\uffff', '😀', 'a'];

function anyString(random: Random, most: number): string {
  const length = int(random, most + 1);
  if (random() < 0.3) return pick(random, UNITS).repeat(length);
  let out = '';
  for (let i = 0; i < length; i++) out += random() < 0.7 ? pick(random, UNITS) : String.fromCharCode(int(random, 0x10000));
  return out;
}

/** Plain JSON data: what the walk accepts and `JSON.stringify` writes as it is. */
function plain(random: Random, depth: number): unknown {
  const kind = depth <= 0 ? int(random, 5) : int(random, 9);
  switch (kind) {
    case 0:
      return null;
    case 1:
      return random() < 0.5;
    case 2:
      return random() < 0.5 ? pick(random, NUMBERS) : anyNumber(random);
    case 3:
    case 4:
      return anyString(random, 40);
    case 5:
    case 6:
      return Array.from({ length: int(random, 6) }, () => plain(random, depth - 1));
    default: {
      // Plain objects and prototype-less ones, keys that need escapes.
      const object: Record<string, unknown> = random() < 0.3 ? (Object.create(null) as Record<string, unknown>) : {};
      const members = int(random, 6);
      for (let i = 0; i < members; i++) object[anyString(random, 6) + String(i)] = plain(random, depth - 1);
      return object;
    }
  }
}

/** `value` with a getter answering the same each time in place of one member (the walk and JSON read it alike). */
function withStableGetter(random: Random, value: unknown): unknown {
  const held = plain(random, 1);
  return Object.defineProperty({ value }, anyString(random, 3) || 'g', { enumerable: true, get: () => held });
}

function utf8Bytes(value: unknown): number {
  const json = JSON.stringify(value) as string | undefined;
  return json === undefined ? 0 : Buffer.byteLength(json, 'utf8');
}

describe('jsonBytesBound', () => {
  it('bounds the UTF-8 bytes of JSON.stringify for generated plain data (numbers from random bits, every escape, astral and lone surrogates, escaped keys, nesting), 4000 values', () => {
    const under: string[] = [];
    for (let seed = 1; seed <= 4000; seed++) {
      const random = seededRandom(seed);
      let value = plain(random, 1 + int(random, 5));
      if (random() < 0.1) value = withStableGetter(random, value);
      const bound = jsonBytesBound('bound.check', value);
      const bytes = utf8Bytes(value);
      if (bound < bytes) under.push(`seed ${seed}: bound ${bound} < ${bytes} bytes of ${JSON.stringify(value).slice(0, 80)}`);
    }
    expect(under.slice(0, 10)).toEqual([]);
  });

  it('bounds every finite number by its JSON text, and every string by its escapes', () => {
    const random = seededRandom(7);
    for (let i = 0; i < 200_000; i++) {
      const value = i < NUMBERS.length ? NUMBERS[i] : anyNumber(random);
      const bound = jsonBytesBound('bound.number', value);
      if (bound < utf8Bytes(value)) throw new Error(`${value}: bound ${bound} < ${utf8Bytes(value)}`);
    }
    // Every UTF-16 unit alone, and in a key.
    for (let unit = 0; unit < 0x10000; unit++) {
      const text = String.fromCharCode(unit);
      for (const value of [text, { [text]: 0 }]) {
        const bound = jsonBytesBound('bound.unit', value);
        if (bound < utf8Bytes(value)) throw new Error(`U+${unit.toString(16)}: bound ${bound} < ${utf8Bytes(value)}`);
      }
    }
  });

  it('bounds data whose object or array has a toJSON the walk does not read as data (or cannot say: Infinity)', () => {
    // Measured before the fix, when the walk counted the members and not what toJSON answers (5002
    // bytes of JSON each): bounds 38 (a non-enumerable toJSON), 2 (prototype-less), 29 (an array's own),
    // 56 (an Array subclass), 98 (nested, 5023 bytes), 2 (a proxy's trap), 38 (an inherited toJSON).
    const big = 'x'.repeat(5000);
    const answer = (): string => big;
    const array = [1] as unknown[] & { toJSON?: () => string };
    array.toJSON = answer;
    class Listing extends Array<number> {
      toJSON(): string {
        return big;
      }
    }
    const cases: Array<[string, unknown]> = [
      ['a non-enumerable toJSON', Object.defineProperty({ a: 1 }, 'toJSON', { value: answer })],
      ['a prototype-less object with a non-enumerable toJSON', Object.defineProperty(Object.create(null), 'toJSON', { value: answer })],
      ["an array's own toJSON", array],
      ['an Array subclass', Listing.from([1, 2])],
      ['one nested in plain data', { list: [{ inner: array }] }],
      ['a proxy whose toJSON trap answers a function', new Proxy({}, { get: (_, name) => (name === 'toJSON' ? answer : undefined) })],
    ];
    const under: string[] = [];
    for (const [name, value] of cases) {
      const bound = jsonBytesBound('bound.tojson', value);
      if (bound < utf8Bytes(value)) under.push(`${name}: bound ${bound} < ${utf8Bytes(value)} bytes`);
    }
    // A toJSON every object inherits (a polluted prototype), added and removed inside this test only.
    Object.defineProperty(Object.prototype, 'toJSON', { value: answer, configurable: true, writable: true });
    try {
      const bound = jsonBytesBound('bound.tojson', { a: 1 });
      const bytes = utf8Bytes({ a: 1 });
      if (bound < bytes) under.push(`an inherited toJSON: bound ${bound} < ${bytes} bytes`);
    } finally {
      delete (Object.prototype as { toJSON?: unknown }).toJSON;
    }
    expect(under).toEqual([]);
  });

  it('over-counts, never under-counts, enumerable properties every object inherits (JSON writes own ones only)', () => {
    Object.defineProperty(Object.prototype, 'inherited', { value: 'i'.repeat(10), enumerable: true, configurable: true, writable: true });
    let bound: number;
    let bytes: number;
    try {
      const value = { a: 'b', nested: [{ c: 1 }] };
      bound = jsonBytesBound('bound.inherited', value);
      bytes = utf8Bytes(value);
    } finally {
      delete (Object.prototype as { inherited?: unknown }).inherited;
    }
    expect(bound).toBeGreaterThanOrEqual(bytes);
  });
});
