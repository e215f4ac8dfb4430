import { BIG_ENTRY_BYTES, bigOrdinals, FRAME_BYTES, isBigEntry } from '../../lib/redis/big-entries';

/** The rule as the scripts weigh an entry (index-big.lua): UTF-8 bytes of every argument, a frame for each and the id, the longest id. */
function bigByBytes(fields: readonly string[]): boolean {
  const bytes = fields.reduce((sum, field) => sum + Buffer.byteLength(field), 41 + FRAME_BYTES * (fields.length + 1));
  return bytes > BIG_ENTRY_BYTES;
}

/** A small seeded generator, so a failure names the seed that reproduces it. */
function generator(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state * 1_664_525 + 1_013_904_223) >>> 0;
    return state / 2 ** 32;
  };
}

const CHARS = ['a', 'é', '€', '😀', '"'];

/** Fields whose UTF-8 size lands within a few bytes of the line, or far below it. */
function fieldsNearTheLine(random: () => number): string[] {
  const count = 2 * (1 + Math.floor(random() * 3));
  const fields: string[] = [];
  let budget = BIG_ENTRY_BYTES - 41 - FRAME_BYTES * (count + 1) + Math.floor(random() * 9) - 4;
  if (random() < 0.3) budget = Math.floor(random() * 2000);
  for (let i = 0; i < count; i++) {
    const name = i % 2 === 0 ? `f${i}` : '';
    let value = name;
    const share = i === count - 1 ? budget : Math.floor(budget * random() * 0.5);
    // Multi-byte characters first, then single bytes to land on the share exactly.
    const char = CHARS[Math.floor(random() * CHARS.length)];
    while (Buffer.byteLength(value) + Buffer.byteLength(char) <= share / 2) value += char;
    value += 'x'.repeat(Math.max(0, share - Buffer.byteLength(value)));
    budget -= Buffer.byteLength(value);
    fields.push(value);
  }
  return fields;
}

describe('big entries as the run scripts are told them (bigOrdinals)', () => {
  it('names exactly the events whose UTF-8 bytes cross the line, for runs of one width and counted runs, 300 generated runs', () => {
    for (let seed = 1; seed <= 300; seed++) {
      const random = generator(seed);
      const events = Array.from({ length: 1 + Math.floor(random() * 6) }, () => fieldsNearTheLine(random));
      const expected = events.flatMap((fields, i) => (bigByBytes(fields) ? [i + 1] : [])).join(',');
      const counted = events.flatMap((fields) => [fields.length, ...fields]);
      expect({ seed, list: bigOrdinals(counted, 0) }).toEqual({ seed, list: expected });
      for (const fields of events) expect({ seed, big: isBigEntry(fields) }).toEqual({ seed, big: bigByBytes(fields) });
      const width = events[0].length;
      if (events.every((fields) => fields.length === width)) {
        expect({ seed, list: bigOrdinals(events.flat(), width) }).toEqual({ seed, list: expected });
      }
    }
  });

  it('weighs a number argument by its decimal text, as Redis receives it, and stops at a malformed count', () => {
    const big = 'x'.repeat(BIG_ENTRY_BYTES);
    expect(bigOrdinals([2, 'n', 12345, 2, 'data', big], 0)).toBe('2');
    expect(bigOrdinals(['n', 12345, 'data', big], 2)).toBe('2');
    expect(bigOrdinals([2, 'data', big, -2, 'a', 'b', 2, 'data', big], 0)).toBe('1');
    expect(bigOrdinals([2, 'data', big, 'two', 'a', 'b'], 0)).toBe('1');
    expect(bigOrdinals([], 4)).toBe('');
  });
});
