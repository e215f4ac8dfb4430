import { PostgresServer, startPostgres } from '../support/postgres';
import { describeDatabaseSchedule, drawDatabaseSchedule } from './database-schedule';
import { DatabaseRunFigures, describeDatabaseRun, describeDatabaseRuns, runDatabaseSchedule } from './run-database-schedule';

/**
 * Seeds CI runs, in order, while the budget lasts. EVENTRAIL_DB_CHAOS_SEEDS=1,2,3 runs those
 * instead; EVENTRAIL_DB_CHAOS_RUNS=N runs N schedules from seed 5000 on with no budget (the soak).
 */
const RUNS = Number(process.env.EVENTRAIL_DB_CHAOS_RUNS ?? '0');
const SEEDS =
  RUNS > 0
    ? Array.from({ length: RUNS }, (_, i) => 5000 + i)
    : (process.env.EVENTRAIL_DB_CHAOS_SEEDS ?? '4001,4002,4003').split(',').map((s) => Number(s.trim()));
/** No new schedule starts after this long (unless soaking); one still running finishes. */
const BUDGET_MS = RUNS > 0 ? Infinity : 45_000;

/**
 * Seeded database fault schedules: an inbox group over 1-2 worker processes
 * and 1-4 partitions, events published directly and through the outbox (its
 * relay in the workers), with pg_terminate_backend on a connection inside an
 * inbox transaction or on every worker connection, PostgreSQL restarts (fast
 * and immediate) and worker SIGKILLs between the publishes. After each: every
 * accepted event in the log once, every entry's effect committed exactly once
 * with its inbox row, effects in per-key order, offsets never back, no worker
 * death the schedule did not cause, no dead letter (the group retries by time), the outbox drained.
 */
describe('fuzz: seeded database fault schedules', () => {
  let postgres: PostgresServer | undefined;

  beforeAll(async () => {
    postgres = await startPostgres();
  });

  afterAll(async () => {
    await postgres?.stop();
  });

  it(
    'every schedule keeps every invariant',
    async () => {
      const began = Date.now();
      const runs: DatabaseRunFigures[] = [];
      for (const seed of SEEDS) {
        if (runs.length > 0 && Date.now() - began > BUDGET_MS) break;
        const schedule = drawDatabaseSchedule(seed);
        const figures = await runDatabaseSchedule(postgres as PostgresServer, schedule);
        runs.push(figures);
        console.log(describeDatabaseRun(figures));
        const failure = figures.violations.map((v) => `[${v.invariant}] ${v.detail}`).join('\n');
        expect(`${failure ? `EVENTRAIL_DB_CHAOS_SEEDS=${seed}\n${describeDatabaseSchedule(schedule)}\n` : ''}${failure}`).toBe('');
      }
      console.log(describeDatabaseRuns(runs));
      expect(runs.length).toBeGreaterThanOrEqual(1);
    },
    Math.max(150_000, RUNS * 120_000),
  );
});
