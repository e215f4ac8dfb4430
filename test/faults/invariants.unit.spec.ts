import type { DeadLetter } from '../../lib';
import { EVENTS, FUZZ_MARK_TTL_MS, FuzzAttempt, GROUPS } from './support/chaos-protocol';
import { checkRun, FuzzLogEntry, RunRecord } from './invariants';
import { drawSchedule } from './schedule';

/**
 * The fuzz checker on hand-made records: quiet on a run that kept every
 * invariant, and each invariant caught when a record breaks it, so a green
 * schedule means the checks ran, not that they cannot fail.
 */
describe('fuzz invariants', () => {
  const schedule = { ...drawSchedule(1), groups: [GROUPS.fuzzIdem, GROUPS.fuzzPlain] };
  const entry = (offset: string, n: number, extra: Partial<FuzzLogEntry> = {}): FuzzLogEntry => ({
    partition: 0,
    offset,
    id: `id-${n}`,
    event: EVENTS.fuzzBoth,
    key: 'k',
    to: undefined,
    data: { n, seq: n },
    ...extra,
  });
  const attempt = (e: FuzzLogEntry, group: string, outcome: FuzzAttempt['outcome'], extra: Partial<FuzzAttempt> = {}): FuzzAttempt => ({
    group,
    partition: e.partition,
    offset: e.offset,
    eventId: e.id,
    key: e.key ?? '',
    attempt: 1,
    pid: 1,
    startedAt: 1_000,
    checkedAt: 1_000,
    outcome,
    mark: null,
    ...extra,
  });
  const letter = (e: FuzzLogEntry, group: string, reason: DeadLetter['reason']): DeadLetter =>
    ({
      id: `1-${e.data.n}`,
      eventId: e.id,
      data: e.data,
      group,
      partition: e.partition,
      offset: e.offset,
      reason,
      error: { name: 'Error', message: 'x', stack: null },
      attempts: 1,
    }) as DeadLetter;

  const e1 = entry('1-0', 1);
  const poison = entry('2-0', 2, { data: { n: 2, seq: 2, poison: { [GROUPS.fuzzIdem]: 'non-retryable' } } });
  const e3 = entry('3-0', 3);
  const good = (): RunRecord => ({
    schedule,
    accepted: [e1, poison, e3].map((e) => ({ n: e.data.n, id: e.id, partition: e.partition, offset: e.offset })),
    log: [[e1, poison, e3]],
    attempts: [
      attempt(e1, GROUPS.fuzzIdem, 'H'),
      attempt(e1, GROUPS.fuzzPlain, 'H'),
      attempt(poison, GROUPS.fuzzIdem, 'P'),
      attempt(poison, GROUPS.fuzzPlain, 'H'),
      attempt(e3, GROUPS.fuzzIdem, 'T'),
      attempt(e3, GROUPS.fuzzIdem, 'H', { attempt: 2 }),
      attempt(e3, GROUPS.fuzzPlain, 'H'),
      // A redelivery that found the done-mark committed after it had started: allowed.
      attempt(e3, GROUPS.fuzzIdem, 'H', { startedAt: 5_000, mark: 5_000 + FUZZ_MARK_TTL_MS }),
    ],
    deadLetters: new Map([
      [GROUPS.fuzzIdem, { current: [letter(poison, GROUPS.fuzzIdem, 'non-retryable')], replayed: [] }],
      [GROUPS.fuzzPlain, { current: [], replayed: [] }],
    ]),
    backwardMoves: [],
    unexpectedExits: [],
    freezes: [],
    // Redis full from 100 to 200, down from 150 to 160: refused events are not in the log.
    fills: [{ from: 100, to: 200 }],
    outages: [{ from: 150, to: 160 }],
    publishes: [
      { events: [1], many: false, from: 10, to: 20, refused: [] },
      { events: [4], many: false, from: 110, to: 111, error: 'RedisFullError', refused: [4] },
      { events: [5, 6], many: true, from: 120, to: 121, error: 'PublishManyError(RedisFullError)', refused: [5, 6] },
      // Through the outage: any error will do.
      { events: [7], many: false, from: 140, to: 165, error: 'RedisUnavailableError', refused: [] },
    ],
  });

  it('finds nothing wrong with a run that kept every invariant', () => {
    expect(checkRun(good())).toEqual([]);
  });

  it('catches each broken invariant', () => {
    const cases: Array<[string, (r: RunRecord) => RunRecord]> = [
      ['delivered', (r) => ({ ...r, attempts: r.attempts.filter((a) => !(a.group === GROUPS.fuzzPlain && a.offset === '3-0')) })],
      ['delivered', (r) => ({ ...r, accepted: [...r.accepted, { n: 9, id: 'id-9', partition: 0, offset: '9-0' }] })],
      ['key-order', (r) => ({ ...r, attempts: [r.attempts[6], ...r.attempts] })],
      ['key-order', (r) => ({ ...r, attempts: r.attempts.filter((a) => a.outcome !== 'P') })],
      [
        'dead-letters',
        (r) => ({
          ...r,
          deadLetters: new Map([
            ...r.deadLetters,
            [GROUPS.fuzzPlain, { current: [letter(e1, GROUPS.fuzzPlain, 'retries-exhausted')], replayed: [] }],
          ]),
        }),
      ],
      [
        'idempotency',
        (r) => ({
          ...r,
          attempts: [...r.attempts, attempt(e1, GROUPS.fuzzIdem, 'H', { startedAt: 9_000, mark: 8_000 + FUZZ_MARK_TTL_MS })],
        }),
      ],
      [
        'replay-target',
        (r) => ({
          ...r,
          log: [[...r.log[0], entry('4-0', 1, { to: GROUPS.fuzzIdem })]],
          attempts: [...r.attempts, attempt(entry('4-0', 1), GROUPS.fuzzPlain, 'H')],
        }),
      ],
      ['offsets', (r) => ({ ...r, backwardMoves: ['offset fuzz-idem|0 moved back'] })],
      ['workers', (r) => ({ ...r, unexpectedExits: ['exited'] })],
      ['drained', (r) => ({ ...r, drainFailure: 'timed out' })],
      [
        'refusals',
        (r) => ({
          ...r,
          publishes: [...(r.publishes ?? []), { events: [3], many: false, from: 1, to: 2, error: 'RedisFullError', refused: [3] }],
        }),
      ],
      [
        'refusals',
        (r) => ({ ...r, publishes: [{ events: [8], many: false, from: 130, to: 131, error: 'RedisUnavailableError', refused: [] }] }),
      ],
      [
        'refusals',
        (r) => ({
          ...r,
          publishes: [{ events: [8, 9], many: true, from: 130, to: 131, error: 'PublishManyError(RedisUnavailableError)', refused: [] }],
        }),
      ],
      ['refusals', (r) => ({ ...r, publishes: [{ events: [8], many: false, from: 130, to: 131, refused: [] }] })],
    ];
    for (const [invariant, breakIt] of cases) expect(checkRun(breakIt(good())).map((v) => v.invariant)).toContain(invariant);
  });

  describe('idempotency: a handler start split from its lease check by a SIGSTOP', () => {
    // Worker pid 1 checked its lease at 7,000, was stopped at 7,010 and resumed at 8,500; another worker
    // committed e1's done-mark at 8,000 meanwhile. Its handler read the clock at 8,501.
    const freeze = { pid: 1, from: 7_010, to: 8_500 };
    const late = (extra: Partial<FuzzAttempt> = {}): FuzzAttempt =>
      attempt(e1, GROUPS.fuzzIdem, 'H', { startedAt: 8_501, checkedAt: 7_000, mark: 8_000 + FUZZ_MARK_TTL_MS, ...extra });
    const idempotency = (attempts: FuzzAttempt[], concurrency = 1): string[] => {
      const run = good();
      return checkRun({
        ...run,
        schedule: { ...run.schedule, consumer: { ...run.schedule.consumer, concurrency } },
        freezes: [freeze],
        attempts: [...run.attempts, ...attempts],
      })
        .filter((v) => v.invariant === 'idempotency')
        .map((v) => v.detail);
    };

    it('is not counted when the check came just before the freeze and the start after it', () => {
      expect(idempotency([late()])).toEqual([]);
      expect(idempotency([late(), late({ eventId: 'id-3', offset: '3-0' })], 2)).toEqual([]);
    });

    it('is counted when the check came after the freeze began, long before it, or was never made', () => {
      expect(idempotency([late({ checkedAt: 8_501 })])).toHaveLength(1);
      expect(idempotency([late({ checkedAt: 6_000 })])).toHaveLength(1);
      expect(idempotency([late({ checkedAt: 0 })])).toHaveLength(1);
      // Another process's freeze does not excuse this one.
      expect(idempotency([late({ pid: 2 })])).toHaveLength(1);
    });

    it('is counted past the handlers one freeze can split (concurrency): a worker starting more skipped its checks', () => {
      const starts = [late(), late({ eventId: 'id-3', offset: '3-0' })];
      expect(idempotency(starts, 1)).toHaveLength(1);
      expect(idempotency(starts, 2)).toEqual([]);
    });
  });
});
