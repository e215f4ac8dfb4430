import { DurableRedis } from './support/durable-redis';
import { describeRun } from './report';
import { RunFigures, runSchedule } from './run-schedule';
import { describeSchedule, drawSchedule } from './schedule';

/**
 * Seeds CI runs, in order, while the budget lasts; each draws a schedule with
 * a mix of every fault kind (see test/faults/schedule.ts). `npm run chaos --
 * --seed S` replays one of them alone, `--runs N` draws N more (the soak).
 * EVENTRAIL_CHAOS_SEEDS=1,2,3 runs those instead.
 */
const SEEDS = (process.env.EVENTRAIL_CHAOS_SEEDS ?? '1008,1016,1003,1011,1029').split(',').map((s) => Number(s.trim()));
/** No new schedule starts after this long; one still running finishes (each drains within a minute at worst). */
const BUDGET_MS = 60_000;
/**
 * Seeded fault schedules: publishes (keyed and keyless, `publish` and
 * `publishMany`), events that fail some attempts and poison events, worker
 * SIGKILLs and SIGSTOP/SIGCONT past the lease TTL, Redis SIGKILLs with AOF
 * (appendfsync always) on a server of this file's own, offset resets,
 * dead-letter replays, rolling deploys, a full Redis (maxmemory below its
 * used memory), a stalled one (SIGSTOP) and a worker's path cut silently,
 * over 1-3 worker processes, 1-8 partitions and 1-2 groups. After each
 * schedule: every accepted publish handled or dead-lettered by each group
 * that handles it, per-key order of first handlings, dead letters only for
 * poison, committed offsets never back (but across a reset), no handler call
 * after the event's done-mark was committed, replays only in their group,
 * publishes refused by a full Redis typed and not in the log, and no worker
 * death the schedule did not cause. The first two seeds draw every exhaustion fault
 * (1008: a full Redis and a cut; 1016: a stall and a cut).
 */
describe('fuzz: seeded fault schedules', () => {
  let server: DurableRedis | undefined;

  beforeAll(async () => {
    server = await DurableRedis.start();
  });

  afterAll(async () => {
    await server?.destroy();
  });

  it('every schedule keeps every invariant', async () => {
    const began = Date.now();
    const runs: RunFigures[] = [];
    for (const seed of SEEDS) {
      if (runs.length > 0 && Date.now() - began > BUDGET_MS) break;
      const schedule = drawSchedule(seed);
      const figures = await runSchedule(server as DurableRedis, schedule);
      runs.push(figures);
      console.log(describeRun(figures));
      const failure = figures.violations.map((v) => `[${v.invariant}] ${v.detail}`).join('\n');
      expect(`${failure ? `npm run chaos -- --seed ${seed}\n${describeSchedule(schedule)}\n` : ''}${failure}`).toBe('');
    }
    expect(runs.length).toBeGreaterThanOrEqual(1);
  }, 150_000);
});
