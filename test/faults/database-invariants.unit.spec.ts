import { checkDatabaseRun, DatabaseLogEntry, DatabaseRunRecord } from './database-invariants';

/** Three events: a and b of key k (in that order), c of key j. */
const LOG: DatabaseLogEntry[][] = [
  [
    { partition: 0, offset: '1-0', id: 'a', key: 'k', n: 0 },
    { partition: 0, offset: '2-0', id: 'c', key: 'j', n: 2 },
    { partition: 0, offset: '3-0', id: 'b', key: 'k', n: 1 },
  ],
];

function run(overrides: Partial<DatabaseRunRecord> = {}): DatabaseRunRecord {
  return {
    accepted: [
      { n: 0, id: 'a' },
      { n: 1, id: 'b' },
    ],
    log: LOG,
    effects: [
      { seq: 1, eventId: 'a', key: 'k' },
      { seq: 2, eventId: 'c', key: 'j' },
      { seq: 3, eventId: 'b', key: 'k' },
    ],
    inbox: ['a', 'b', 'c'],
    deadLetters: [],
    outboxLeft: 0,
    backwardMoves: [],
    unexpectedExits: [],
    ...overrides,
  };
}

const invariants = (record: DatabaseRunRecord): string[] => checkDatabaseRun(record).map((v) => v.invariant);

describe('database schedule invariants', () => {
  it('finds nothing wrong in a clean run', () => {
    expect(checkDatabaseRun(run())).toEqual([]);
  });

  it('finds an accepted event missing from the log, and an entry without its effect', () => {
    expect(invariants(run({ accepted: [{ n: 9, id: 'z' }] }))).toEqual(['delivered']);
    const effects = run().effects.filter((e) => e.eventId !== 'c');
    expect(checkDatabaseRun(run({ effects, inbox: ['a', 'b'] }))).toEqual([
      { invariant: 'delivered', detail: 'event 2 (c) at 0|2-0 (key j) has no effect' },
    ]);
  });

  it('finds a second effect of one event', () => {
    const effects = [...run().effects, { seq: 4, eventId: 'b', key: 'k' }];
    expect(invariants(run({ effects }))).toEqual(['exactly-once']);
  });

  it('finds inbox rows and effects that disagree, either way', () => {
    expect(invariants(run({ inbox: ['a', 'b'] }))).toEqual(['inbox-agrees']);
    expect(invariants(run({ inbox: ['a', 'b', 'c', 'x'] }))).toEqual(['inbox-agrees']);
  });

  it("finds effects committed out of their key's order, not across keys", () => {
    const effects = [
      { seq: 1, eventId: 'b', key: 'k' },
      { seq: 2, eventId: 'a', key: 'k' },
      { seq: 3, eventId: 'c', key: 'j' },
    ];
    expect(invariants(run({ effects }))).toEqual(['key-order']);
    const acrossKeys = [
      { seq: 1, eventId: 'c', key: 'j' },
      { seq: 2, eventId: 'a', key: 'k' },
      { seq: 3, eventId: 'b', key: 'k' },
    ];
    expect(invariants(run({ effects: acrossKeys }))).toEqual([]);
  });

  it('finds an event appended twice, offsets moved back, dead letters, dead workers, and what was not drained', () => {
    const twice = [[...LOG[0], { partition: 0, offset: '4-0', id: 'a', key: 'k', n: 0 }]];
    expect(invariants(run({ log: twice }))).toEqual(['appended-once']);
    expect(invariants(run({ backwardMoves: ['0|5-0 -> 0|4-0'] }))).toEqual(['offsets']);
    const letter = { eventId: 'c', reason: 'retries-exhausted', error: 'Error: connection lost', attempts: 4 };
    expect(invariants(run({ deadLetters: [letter] }))).toEqual(['dead-letters']);
    expect(invariants(run({ unexpectedExits: ['pid 7 exited 1'] }))).toEqual(['workers']);
    expect(invariants(run({ outboxLeft: 2 }))).toEqual(['drained']);
    expect(invariants(run({ drainFailure: 'timed out' }))).toEqual(['drained']);
  });
});
