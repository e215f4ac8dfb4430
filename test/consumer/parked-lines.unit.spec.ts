import { ParkedLines, parseLine, PARKED_FIELD_PREFIX, PARKED_FLOOR_FIELD } from '../../lib/consumer/handling/parked-lines';
import type { RawEntry } from '../../lib/wire/codec';
import { seededRandom } from '../support/seeded-random';

const REDELIVERY = { delayMs: 1_000, factor: 2, maxDelayMs: 8_000, maxAgeMs: 60_000 };
const NO_QUICK = { maxRetries: 0, retryBackoffMs: 200, retryBackoffMaxMs: 2_000 };

function entry(offset: string, key?: string): RawEntry {
  return { offset, id: `id-${offset}`, event: 'e', key, time: 0, data: '{}', partition: 0 } as unknown as RawEntry;
}

function lines(mode: 'key' | 'unordered', clock: { now: number }, random = () => 1, quick = NO_QUICK): ParkedLines {
  return new ParkedLines({ mode, redelivery: REDELIVERY, quick, now: () => clock.now, random });
}

const failure = (attempts = 3) => ({ error: new Error('down'), attempts, firstFailedAt: new Date() });

describe('ParkedLines', () => {
  it('parks a head, holds the later messages of its key once each, and releases them in order', () => {
    const clock = { now: 1_000_000 };
    const parked = lines('key', clock);
    expect(parked.failed(entry('1-0', 'A'), failure())).toBe('parked');
    expect(parked.holds(entry('2-0', 'A'))).toBe(true);
    expect(parked.holds(entry('3-0', 'B'))).toBe(false);
    parked.behind(entry('2-0', 'A'));
    parked.behind(entry('2-0', 'A')); // read again after a restart: not twice
    parked.behind(entry('1-0', 'A')); // the head itself, read again
    parked.behind(entry('4-0', 'A'));
    expect(parked.state('k:A')?.ids).toEqual(['1-0', '2-0', '4-0']);
    expect(parked.parkedCount).toBe(3);
    parked.release('k:A');
    expect(parked.state('k:A')).toMatchObject({ ids: ['2-0', '4-0'], a: 0, f: 0, n: 0 });
    expect(parked.due().lines).toEqual(['k:A']); // the next head is due at once
    parked.release('k:A');
    parked.release('k:A');
    expect(parked.size).toBe(0);
    // The floor goes with the changes: nothing is parked any more.
    expect(parked.takeChanges()).toEqual([
      [`${PARKED_FIELD_PREFIX}k:A`, ''],
      [PARKED_FLOOR_FIELD, ''],
    ]);
  });

  it('sends the oldest parked id as the floor with every change, and follows it as heads are released', () => {
    const parked = lines('key', { now: 1 });
    parked.failed(entry('5-0', 'B'), failure());
    parked.failed(entry('3-0', 'A'), failure());
    parked.behind(entry('9-0', 'A'));
    expect(parked.takeChanges().at(-1)).toEqual([PARKED_FLOOR_FIELD, '3-0']);
    expect(parked.takeChanges()).toEqual([]); // nothing changed, nothing sent
    parked.release('k:A');
    expect(parked.takeChanges().at(-1)).toEqual([PARKED_FLOOR_FIELD, '5-0']);
    parked.release('k:B');
    expect(parked.floor).toBe('9-0');
    parked.release('k:A');
    expect(parked.floor).toBeUndefined();
  });

  it('hands out due lines oldest due first, each once until it is requeued, and skips busy ones until then', () => {
    const clock = { now: 10_000 };
    const parked = lines('key', clock, () => 1);
    for (const [offset, key] of [
      ['1-0', 'A'],
      ['2-0', 'B'],
      ['3-0', 'C'],
    ])
      parked.failed(entry(offset, key), failure());
    expect(parked.due()).toEqual({ lines: [], nextAt: 11_000 });
    parked.release('k:B'); // emptied: gone
    clock.now = 10_500;
    parked.failed(entry('4-0', 'D'), failure()); // due at 11,500, after A
    parked.apply({ field: 'parkcmd:retry:k:C', op: 'retry', key: 'C', heads: [] }); // due at once
    clock.now = 12_000;
    expect(parked.due(new Map([['k:C', true]]))).toEqual({ lines: ['k:A', 'k:D'], nextAt: undefined });
    expect(parked.due()).toEqual({ lines: [], nextAt: undefined }); // handed out or busy: not again
    parked.requeue('k:C');
    parked.failed(entry('1-0', 'A'), failure(4)); // failed again: due at its next tier
    expect(parked.due()).toEqual({ lines: ['k:C'], nextAt: 14_000 });
  });

  it("'unordered': a line per message, and nothing is held behind it", () => {
    const parked = lines('unordered', { now: 1 });
    parked.failed(entry('1-0', 'A'), failure());
    expect(parked.holds(entry('2-0', 'A'))).toBe(false);
    expect(parked.lineOf(entry('1-0', 'A'))).toBe('m:1-0');
    expect(parked.isHead(entry('1-0', 'A'))).toBe(true);
  });

  it('keyless messages share one line', () => {
    const parked = lines('key', { now: 1 });
    parked.failed(entry('1-0'), failure());
    expect(parked.holds(entry('2-0'))).toBe(true);
    expect(parked.holds(entry('3-0', ''))).toBe(true);
    expect(parked.holds(entry('4-0', 'k'))).toBe(false);
  });

  it('waits delayMs × factor per failed redelivery, capped, with equal jitter, and never past maxAgeMs', () => {
    const clock = { now: 10_000_000 };
    const full = lines('key', clock, () => 1);
    const half = lines('key', clock, () => 0);
    const waits: Array<[number, number]> = [];
    for (let attempt = 3; attempt <= 9; attempt++) {
      full.failed(entry('1-0', 'A'), failure(attempt));
      half.failed(entry('1-0', 'A'), failure(attempt));
      waits.push([half.state('k:A')!.n - clock.now, full.state('k:A')!.n - clock.now]);
    }
    // Without quick tiers the first wait is delayMs, whatever attempt failed; then × factor per failed redelivery, up to maxDelayMs.
    expect(waits).toEqual([
      [500, 1_000],
      [1_000, 2_000],
      [2_000, 4_000],
      [4_000, 8_000],
      [4_000, 8_000],
      [4_000, 8_000],
      [4_000, 8_000],
    ]);
    // Near the end of the budget the wait ends at it; past it, the head is given up.
    clock.now += 59_000 - (clock.now - full.state('k:A')!.f);
    expect(full.failed(entry('1-0', 'A'), failure(10))).toBe('parked');
    expect(full.state('k:A')!.n - full.state('k:A')!.f).toBeLessThanOrEqual(60_000);
    clock.now += 2_000;
    expect(full.failed(entry('1-0', 'A'), failure(11))).toBe('give-up');
  });

  it('waits the quick tiers first (maxRetries of them, retryBackoffMs doubling up to retryBackoffMaxMs), then the redelivery tiers', () => {
    const clock = { now: 10_000_000 };
    const quick = { maxRetries: 3, retryBackoffMs: 200, retryBackoffMaxMs: 500 };
    const full = lines('key', clock, () => 1, quick);
    const half = lines('key', clock, () => 0, quick);
    const waits: Array<[number, number]> = [];
    for (let attempt = 1; attempt <= 6; attempt++) {
      full.failed(entry('1-0', 'A'), failure(attempt));
      half.failed(entry('1-0', 'A'), failure(attempt));
      waits.push([half.state('k:A')!.n - clock.now, full.state('k:A')!.n - clock.now]);
    }
    expect(waits).toEqual([
      [100, 200],
      [200, 400],
      [250, 500],
      [500, 1_000],
      [1_000, 2_000],
      [2_000, 4_000],
    ]);
    // Each line has its own tiers: another key parked now starts at the first quick one.
    expect(full.failed(entry('2-0', 'B'), failure(1))).toBe('parked');
    expect(full.state('k:B')!.n - clock.now).toBe(200);
  });

  it('gives up at once with maxAgeMs 0', () => {
    const parked = new ParkedLines({ mode: 'key', redelivery: { ...REDELIVERY, maxAgeMs: 0 }, quick: NO_QUICK, now: () => 5 });
    expect(parked.failed(entry('1-0', 'A'), failure())).toBe('give-up');
  });

  it('writes each line with its ids first (the commit script reads the oldest from there), and reads it back', () => {
    const parked = lines('key', { now: 7 });
    parked.failed(entry('5-1', 'x"y'), failure());
    parked.behind(entry('6-0', 'x"y'));
    const [[field, value]] = parked.takeChanges();
    expect(field).toBe('park:k:x"y');
    expect(value.startsWith('{"ids":["5-1"')).toBe(true);
    expect(parseLine(value)).toMatchObject({ ids: ['5-1', '6-0'], k: 'x"y', t: '6-0' });
    const loaded = lines('key', { now: 7 });
    expect(loaded.load({ [field]: value, position: 'x', 'park:k:bad': '{"ids":[]}' })).toEqual(['park:k:bad']);
    expect(loaded.state('k:x"y')?.ids).toEqual(['5-1', '6-0']);
  });

  it("works lines stored under the other mode's names (a change of ordering), the lines of one key as one in log order", () => {
    const stored = (ids: string[], k: string, more: object = {}) =>
      JSON.stringify({ ids, k, a: 1, f: 1, n: 50, e: 'x', t: ids[ids.length - 1], r: 0, c: 0, ...more });
    // 'key' inherits two lines 'unordered' parked for key A (the newer one due first), and one for B.
    const byKey = lines('key', { now: 100 });
    byKey.load({
      'park:m:3-0': stored(['3-0'], 'A', { a: 1, f: 40, n: 60, e: 'three' }),
      'park:m:1-0': stored(['1-0'], 'A', { a: 3, f: 20, n: 90, e: 'one', d: 2 }),
      'park:m:2-0': stored(['2-0'], 'B'),
    });
    // A's become one line in log order, with the oldest head's state and the earliest first failure.
    expect(byKey.state('k:A')).toEqual({ ids: ['1-0', '3-0'], k: 'A', a: 3, f: 20, n: 90, e: 'one', d: 2, t: '3-0', r: 0, c: 0 });
    expect(byKey.state('m:1-0')).toBeUndefined();
    expect(byKey.state('m:2-0')?.ids).toEqual(['2-0']); // alone: worked where it is
    expect(new Map(byKey.takeChanges())).toEqual(
      new Map([
        ['park:m:3-0', ''],
        ['park:m:1-0', ''],
        ['park:k:A', expect.stringContaining('"ids":["1-0","3-0"]')],
        [PARKED_FLOOR_FIELD, '1-0'],
      ]),
    );
    expect(byKey.holds(entry('4-0', 'A'))).toBe(true);
    expect(byKey.holds(entry('4-1', 'C'))).toBe(false);
    // A later message of A waits behind the line of A; a failing head stays in its line.
    byKey.behind(entry('4-0', 'A'));
    expect(byKey.state('k:A')?.ids).toEqual(['1-0', '3-0', '4-0']);
    expect(byKey.lineOf(entry('1-0', 'A'))).toBe('k:A');
    expect(byKey.failed(entry('1-0', 'A'), failure(2))).toBe('parked');
    expect(byKey.size).toBe(2);
    expect(byKey.isHead(entry('1-0', 'A'))).toBe(true);
    expect(byKey.isHead(entry('3-0', 'A'))).toBe(false);
    byKey.release('k:A');
    expect(byKey.isHead(entry('3-0', 'A'))).toBe(true);
    byKey.release('k:A');
    byKey.release('k:A');
    expect(byKey.holds(entry('5-0', 'A'))).toBe(false);
    expect(byKey.lineOf(entry('5-0', 'A'))).toBe('k:A');
    // A key line and an 'unordered' line of the same key: one line too, under the key's name.
    const mixed = lines('key', { now: 100 });
    mixed.load({ 'park:k:A': stored(['5-0', '7-0'], 'A', { f: 0, a: 0 }), 'park:m:6-0': stored(['6-0'], 'A') });
    expect(mixed.state('k:A')).toMatchObject({ ids: ['5-0', '6-0', '7-0'], a: 0, f: 0, t: '7-0' });
    expect(mixed.size).toBe(1);
    // 'unordered' inherits a key line: its head fails in it; later messages of the key are not held.
    const unordered = lines('unordered', { now: 100 });
    unordered.load({ 'park:k:A': stored(['1-0', '2-0'], 'A') });
    expect(unordered.lineOf(entry('1-0', 'A'))).toBe('k:A');
    expect(unordered.failed(entry('1-0', 'A'), failure(2))).toBe('parked');
    expect(unordered.size).toBe(1);
    expect(unordered.holds(entry('3-0', 'A'))).toBe(false);
  });

  it('counts a redelivery a dead owner left running as a crash, due at once', () => {
    const parked = lines('key', { now: 100 });
    parked.load({ 'park:k:A': JSON.stringify({ ids: ['1-0'], k: 'A', a: 4, f: 1, n: 99_999, e: 'x', t: '1-0', r: 1, c: 2 }) });
    parked.countCrashes();
    expect(parked.state('k:A')).toMatchObject({ r: 0, c: 3, n: 0 });
  });

  it("applies an operator's give-up only to the heads it names, so a command applied twice never gives up the next one", () => {
    const parked = lines('key', { now: 1 });
    parked.failed(entry('1-0', 'A'), failure());
    parked.behind(entry('2-0', 'A'));
    const [command] = ParkedLines.commands({ 'parkcmd:give-up:k:A': JSON.stringify(['1-0']), 'park:k:A': '{}' });
    expect(command).toMatchObject({ op: 'give-up', key: 'A', heads: ['1-0'] });
    expect(parked.apply(command)).toBe(1);
    expect(parked.state('k:A')?.g).toBe(1);
    parked.release('k:A');
    expect(parked.apply(command)).toBe(0);
    expect(parked.state('k:A')?.g).toBeUndefined();
    expect(ParkedLines.commands({ 'parkcmd:retry:*': '123', 'parkcmd:other:x': '1' })).toEqual([
      { field: 'parkcmd:retry:*', op: 'retry', key: undefined, heads: [] },
    ]);
  });

  it('never throws on a stored value it did not write (generated)', () => {
    const random = seededRandom(27);
    const pieces = ['{', '}', '[', ']', '"ids"', ':', ',', '"1-0"', 'null', '1e999', '"k"', '"t"', '-', 'true', '"a"', '0', ' ', '\\', '"'];
    for (let i = 0; i < 2_000; i++) {
      const length = Math.floor(random() * 20);
      const value = Array.from({ length }, () => pieces[Math.floor(random() * pieces.length)]).join('');
      const parsed = parseLine(value);
      if (parsed) {
        expect(parsed.ids.length).toBeGreaterThan(0);
        expect(typeof parsed.k).toBe('string');
      }
    }
    for (const value of [
      '',
      'null',
      '[]',
      '{"ids":"1-0"}',
      '{"ids":["x"],"k":"a","a":0,"f":0,"n":0,"t":"1-0","c":0}',
      '{"ids":["1-0"],"k":null}',
    ]) {
      expect(parseLine(value)).toBeUndefined();
    }
  });

  it('answers has, holds and isHead as its lines hold, with few parked keys and with many, through parks and releases (generated)', () => {
    // Up to 16 keys or heads a fetched entry is compared with each in turn, past that looked up: both sides of
    // that limit, crossed back and forth, must answer what a plain model of the lines says.
    for (const mode of ['key', 'unordered'] as const) {
      for (const seed of [1, 2, 3, 4, 5, 6]) {
        const random = seededRandom(seed);
        const parked = lines(mode, { now: 1 });
        const keyCount = seed % 2 === 0 ? 6 : 40;
        const model = new Map<string, { key: string; ids: string[] }>();
        const keyOf = new Map<string, string>();
        let next = 1;
        for (let step = 0; step < 400; step++) {
          const key = `k${Math.floor(random() * keyCount)}`;
          if (random() < 0.55 || model.size === 0) {
            const offset = `${next++}-0`;
            keyOf.set(offset, key);
            const fresh = entry(offset, key);
            if (parked.holds(fresh)) {
              parked.behind(fresh);
              model.get(`k:${key}`)!.ids.push(offset);
            } else {
              expect(parked.has(fresh)).toBe(false);
              expect(parked.failed(fresh, failure())).toBe('parked');
              const name = mode === 'key' ? `k:${key}` : `m:${offset}`;
              model.set(name, { key, ids: [offset] });
            }
          } else {
            const names = [...model.keys()];
            const name = names[Math.floor(random() * names.length)];
            parked.release(name);
            const line = model.get(name)!;
            line.ids.shift();
            if (line.ids.length === 0) model.delete(name);
          }
          const parkedKeys = new Set([...model.values()].map((line) => line.key));
          for (let k = 0; k < keyCount; k++) {
            const probe = entry(`${next + 1_000_000}-0`, `k${k}`);
            expect(parked.holds(probe)).toBe(mode === 'key' && parkedKeys.has(`k${k}`));
            expect(parked.has(probe)).toBe(false);
          }
          for (const [offset, key] of keyOf) {
            const probe = entry(offset, key);
            const lines = [...model.values()];
            expect(parked.has(probe)).toBe(lines.some((line) => line.ids.includes(offset)));
            expect(parked.isHead(probe)).toBe(lines.some((line) => line.ids[0] === offset));
          }
        }
        expect(parked.size).toBe(model.size);
      }
    }
  });

  it('holds a key only for its own lines: one loaded under a name neither mode writes holds none, with few keys and with many (generated)', () => {
    // A stored line is worked under the name it was stored with, whatever it is (`park:<name>`); it holds a later
    // message of its key only when it is the key's line (`k:<key>`) or an 'unordered' line of it (`m:<id>`). A line
    // under another name (a hand-edited hash, another version's name) holds nothing: holding the message would have
    // the fetch count it parked behind a line that `behind` does not find, and it would be neither handled nor parked.
    const stored = (id: string, k: string) => JSON.stringify({ ids: [id], k, a: 1, f: 1, n: 50, e: 'x', t: id, r: 0, c: 0 });
    const parked = lines('key', { now: 100 });
    expect(parked.load({ 'park:x': stored('1-0', 'A') })).toEqual([]);
    expect(parked.holds(entry('2-0', 'A'))).toBe(false);
    expect(parked.has(entry('2-0', 'A'))).toBe(false);
    expect(parked.isHead(entry('1-0', 'A'))).toBe(true);
    expect(parked.lineOf(entry('1-0', 'A'))).toBe('x');
    const wrong: string[] = [];
    for (const seed of [1, 2, 3, 4, 5, 6, 7, 8]) {
      const random = seededRandom(seed);
      const pick = <T>(values: readonly T[]): T => values[Math.floor(random() * values.length)];
      // 4 keys stay under the 16 a fetched entry is compared with in turn; 24 go past it.
      const keys = [...Array.from({ length: seed % 2 === 0 ? 4 : 24 }, (_, i) => `k${i}`), '', 'k:k0', 'm:1-0'];
      const foreign = ['', 'x', 'K:k0', 'p:1', 'k', 'mk:0'];
      const fields: Record<string, string> = {};
      const holding = new Set<string>();
      let next = 1;
      for (let i = 0; i < 40; i++) {
        const key = pick(keys);
        const id = `${next++}-0`;
        const r = random();
        if (r < 0.3) fields[`${PARKED_FIELD_PREFIX}k:${key}`] = stored(id, key);
        else if (r < 0.6) fields[`${PARKED_FIELD_PREFIX}m:${id}`] = stored(id, key);
        else if (r < 0.8) fields[`${PARKED_FIELD_PREFIX}${pick(foreign)}`] = stored(id, key);
        else fields[`${PARKED_FIELD_PREFIX}${pick(foreign)}`] = stored(id, `only${i}`); // a key no other line has
        if (r < 0.6) holding.add(key);
      }
      const parked = lines('key', { now: 100 });
      expect(parked.load(fields)).toEqual([]);
      for (const key of [...keys, ...Array.from({ length: 40 }, (_, i) => `only${i}`)]) {
        const later = entry(`${next++}-0`, key);
        const holds = parked.holds(later);
        if (holds !== holding.has(key)) wrong.push(`seed ${seed}, key ${JSON.stringify(key)}: holds ${holds}`);
        if (!holds) continue;
        parked.behind(later);
        if (!parked.has(later)) wrong.push(`seed ${seed}, key ${JSON.stringify(key)}: held, in no line`);
      }
    }
    expect(wrong).toEqual([]);
  });
});
