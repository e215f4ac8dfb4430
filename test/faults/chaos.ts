/**
 * `npm run chaos`: runs seeded fault schedules against a redis-server of its
 * own (AOF, fsync always, in a temp dir, on loopback) and checks the
 * invariants after each one.
 *
 *   npm run chaos -- --seed 1234          replay one schedule
 *   npm run chaos -- --runs 50            50 schedules, seeds drawn from the clock (printed)
 *   npm run chaos -- --runs 50 --seed 7   seeds 7, 8, ... 56
 *   --out file.jsonl                      also write each run's figures as a JSON line
 *   --keep                                keep each run's keys in Redis (and the server running until exit)
 *
 * Exits 1 when any schedule broke an invariant; the seed, the schedule and the
 * violations are printed for each such run.
 */
import { appendFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DurableRedis } from './support/durable-redis';
import { describeRun, summarize } from './report';
import { RunFigures, runSchedule } from './run-schedule';
import { describeSchedule, drawSchedule } from './schedule';

interface Args {
  seed?: number;
  runs: number;
  out?: string;
  keep: boolean;
}

function parseArgs(argv: string[]): Args {
  const args: Args = { runs: 1, keep: false };
  for (let i = 0; i < argv.length; i++) {
    const flag = argv[i];
    const value = (): number => {
      const n = Number(argv[++i]);
      if (!Number.isInteger(n) || n < 0) throw new Error(`${flag} needs a non-negative integer, got ${argv[i]}`);
      return n;
    };
    if (flag === '--seed') args.seed = value();
    else if (flag === '--runs') args.runs = Math.max(1, value());
    else if (flag === '--out') args.out = argv[++i];
    else if (flag === '--keep') args.keep = true;
    else throw new Error(`unknown argument ${flag} (use --seed S, --runs N, --out FILE, --keep)`);
  }
  return args;
}

async function main(): Promise<void> {
  const args = parseArgs(process.argv.slice(2));
  const first = args.seed ?? Date.now() % 1_000_000_000;
  const server = await DurableRedis.start();
  const runs: RunFigures[] = [];
  try {
    for (let i = 0; i < args.runs; i++) {
      const schedule = drawSchedule(first + i);
      const figures = await runSchedule(server, schedule, { keep: args.keep });
      runs.push(figures);
      console.log(describeRun(figures));
      if (figures.violations.length > 0) {
        console.log(`FAILED: npm run chaos -- --seed ${schedule.seed}\n${describeSchedule(schedule)}`);
        for (const v of figures.violations) console.log(`  [${v.invariant}] ${v.detail}`);
        if (figures.skipped.length) console.log(`  skipped: ${figures.skipped.join('; ')}`);
      }
      if (figures.record) {
        const file = join(tmpdir(), `eventrail-fuzz-seed-${schedule.seed}.json`);
        writeFileSync(
          file,
          JSON.stringify(figures.record, (_key, value: unknown) => (value instanceof Map ? Object.fromEntries(value) : value)),
        );
        console.log(`  what was checked: ${file}`);
      }
      const { record: _record, ...line } = figures;
      if (args.out) appendFileSync(args.out, `${JSON.stringify(line)}\n`);
    }
  } finally {
    await server.destroy();
  }
  console.log(summarize(runs));
  process.exitCode = runs.some((r) => r.violations.length > 0) ? 1 : 0;
}

// An interrupted run still kills its workers and its server (their exit hooks run on exit).
process.once('SIGINT', () => process.exit(130));
process.once('SIGTERM', () => process.exit(143));

if (require.main === module) {
  main().catch((error: unknown) => {
    console.error(error);
    process.exit(2);
  });
}
