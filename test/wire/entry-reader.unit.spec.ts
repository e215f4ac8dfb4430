import { EntryOrigin, isMalformed, readEntry } from '../../lib/wire/codec';
import { logTag } from '../../lib/wire/event-id';
import { readEntryBuffers } from '../../lib/wire/entry-reader';
import { seededRandom } from '../support/seeded-random';

const ORIGIN: EntryOrigin = { partition: 5, logTag: logTag('eventrail') };

type Fields = Buffer[];

/** Names the reader must tell apart: the format's own, and others that share a length, a first byte or a prefix with one. */
const NAMES = [
  ...['id', 'event', 'key', 'time', 'data', 'headers', 'to'],
  ...['ix', 'it', 'tx', 'iD', 'ID', 'To', 'eventz', 'evenT', 'evens', 'Event', 'e', 'kex', 'kez', 'Key', 'keys', 'k'],
  ...['dat', 'datA', 'date', 'dbta', 'tima', 'timE', 'tame', 'DATA', 'datas', 'headerz', 'header', 'headers ', 'hEaders', ' id'],
  ...['', 'é', 'dätä', '\u0000ata', 'ключ', '🙂'],
];
const TEXTS = [
  '',
  'x',
  'order.placed',
  '{"n":1}',
  '[1,2]',
  '1700000000000',
  'soon',
  'NaN',
  '12.5',
  'ünïcödé ✓',
  '🙂🙃',
  'a\r\nb',
  '"quoted"',
];

function pick<T>(random: () => number, list: readonly T[]): T {
  return list[Math.floor(random() * list.length)];
}

/** A value: text from the list, random bytes (often invalid UTF-8), or long text. */
function value(random: () => number): Buffer {
  const kind = random();
  if (kind < 0.6) return Buffer.from(pick(random, TEXTS));
  if (kind < 0.9) return Buffer.from(Array.from({ length: Math.floor(random() * 40) }, () => Math.floor(random() * 256)));
  return Buffer.from('é'.repeat(Math.floor(random() * 300)) + '{"big":true}');
}

/**
 * A random entry's fields: usually a valid event (event and data, maybe key, id, time, headers, to) in a
 * random order with unknown fields between, sometimes without event or data, with a repeated field, or with
 * a trailing name without its value.
 */
function randomFields(random: () => number): Fields {
  const pairs: Array<[string, Buffer]> = [];
  if (random() < 0.9) pairs.push(['event', random() < 0.9 ? Buffer.from(pick(random, TEXTS.slice(1))) : Buffer.alloc(0)]);
  if (random() < 0.9) pairs.push(['data', value(random)]);
  for (const optional of ['key', 'id', 'time', 'headers', 'to']) if (random() < 0.3) pairs.push([optional, value(random)]);
  if (random() < 0.2) pairs.push(['time', Buffer.from(String(Math.floor(random() * 2e12)))]);
  const unknown = Math.floor(random() * 4);
  for (let i = 0; i < unknown; i++) pairs.push([pick(random, NAMES), value(random)]);
  if (random() < 0.1 && pairs.length > 0) pairs.push([pairs[0][0], value(random)]); // a repeated name: the last one wins
  for (let i = pairs.length - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1));
    [pairs[i], pairs[j]] = [pairs[j], pairs[i]];
  }
  const fields = pairs.flatMap(([name, v]) => [Buffer.from(name), v]);
  if (random() < 0.05) fields.push(Buffer.from(pick(random, NAMES)));
  return fields;
}

function randomOffset(random: () => number): string {
  const ms = random() < 0.1 ? '0' : String(1_600_000_000_000 + Math.floor(random() * 1e11));
  const seq = random() < 0.9 ? Math.floor(random() * 10) : Math.floor(random() * 2 ** 32);
  return `${ms}-${seq}`;
}

/** What `readEntry` makes of the strings ioredis would have decoded (UTF-8, invalid bytes replaced). */
function expected(offset: string, fields: Fields): ReturnType<typeof readEntry> {
  return readEntry(
    offset,
    fields.map((f) => f.toString()),
    ORIGIN,
  );
}

describe('reading entries from bytes', () => {
  it('reads every generated entry exactly as readEntry reads its decoded strings, from an xreadBuffer reply', () => {
    const kinds = { valid: 0, malformed: 0 };
    for (let seed = 1; seed <= 40; seed++) {
      const random = seededRandom(seed);
      const batch: Array<[string, Fields]> = Array.from({ length: 1 + Math.floor(random() * 60) }, () => [
        randomOffset(random),
        randomFields(random),
      ]);
      const want = batch.map(([offset, fields]) => expected(offset, fields));
      for (const entry of want) kinds[isMalformed(entry) ? 'malformed' : 'valid']++;
      const fromBuffers = batch.map(([offset, fields]) => readEntryBuffers(Buffer.from(offset), fields, ORIGIN));
      expect({ seed, entries: fromBuffers }).toEqual({ seed, entries: want });
    }
    // The generator makes both, plenty of each.
    expect(kinds.valid).toBeGreaterThan(500);
    expect(kinds.malformed).toBeGreaterThan(100);
  });

  it.each<[string, string[]]>([
    ['missing field "event"', ['data', '{}', 'key', 'k']],
    ['missing field "event"', ['event', '', 'data', '{}']],
    ['missing field "event"', ['Event', 'x', 'data', '{}']],
    ['missing field "data"', ['event', 'x', 'dat', '{}', 'datA', '{}', 'date', '{}']],
    ['field "time" is not a number of milliseconds', ['event', 'x', 'data', '1', 'time', 'soon']],
  ])('finds %s in %j, keeping every field as a string', (reason, strings) => {
    const fields = strings.map((s) => Buffer.from(s));
    const malformed = { offset: '7-1', fields: strings, reason, to: undefined };
    expect(readEntryBuffers(Buffer.from('7-1'), fields, ORIGIN)).toEqual(malformed);
  });

  it('keeps the `to` of a malformed entry, so a replay of it stays with its group', () => {
    const fields = ['to', 'ledger', 'data', '{}'].map((s) => Buffer.from(s));
    expect(readEntryBuffers(Buffer.from('1-0'), fields, ORIGIN)).toMatchObject({ reason: 'missing field "event"', to: 'ledger' });
  });

  it("reads the same through Buffer's toString where Node would not have utf8Slice and latin1Slice", () => {
    const random = seededRandom(3);
    const batch: Array<[string, Fields]> = Array.from({ length: 50 }, () => [randomOffset(random), randomFields(random)]);
    const prototype = Buffer.prototype as unknown as Record<string, unknown>;
    const own = { utf8Slice: prototype.utf8Slice, latin1Slice: prototype.latin1Slice };
    let reader: typeof import('../../lib/wire/entry-reader') | undefined;
    // The module looks for them once, when loaded; toString needs them back before anything is read.
    prototype.utf8Slice = prototype.latin1Slice = undefined;
    try {
      jest.isolateModules(() => (reader = jest.requireActual<typeof import('../../lib/wire/entry-reader')>('../../lib/wire/entry-reader')));
    } finally {
      Object.assign(prototype, own);
    }
    const want = batch.map(([offset, fields]) => expected(offset, fields));
    expect(batch.map(([offset, fields]) => reader?.readEntryBuffers(Buffer.from(offset), fields, ORIGIN))).toEqual(want);
  });
});
