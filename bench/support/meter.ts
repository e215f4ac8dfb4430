import { readFileSync } from 'node:fs';
import type Redis from 'ioredis';
import { info } from './redis-tools';
import type { MetricSpec } from './scenario';

/** Redis main-thread CPU per event: the cost every user of a shared Redis pays. */
export const REDIS_CPU: MetricSpec = { key: 'redisUs', unit: 'µs Redis CPU/event', digits: 2 };
/** CPU of the measured system's own processes (user + system) per event. */
export const CLIENT_CPU: MetricSpec = { key: 'clientUs', unit: 'µs client CPU/event', digits: 2 };
/** Commands Redis ran per event (a script's own calls count in its one EVALSHA, as `INFO commandstats` counts them). */
export const COMMANDS: MetricSpec = { key: 'cmds', unit: 'commands/event', digits: 3 };
/** Client and Redis CPU together per event: what a delivered event costs the machines. */
export const TOTAL_CPU: MetricSpec = { key: 'cpuUs', unit: 'µs client + Redis CPU/event', digits: 2 };
/** The three costs, after the rate, in every scenario that meters its runs. */
export const COSTS: MetricSpec[] = [REDIS_CPU, CLIENT_CPU, COMMANDS];

interface RedisCounters {
  cpuUs: number;
  commands: number;
}

/**
 * What a timed window cost: Redis main-thread CPU (`INFO cpu`, `used_cpu_*_main_thread`, falling back
 * to the whole server's on servers without them), commands (`INFO commandstats`, the meter's own
 * `INFO` left out) and the CPU of this process plus any child processes given by pid (`/proc`).
 * Start it right before the clock and stop it right after: the two INFO calls are outside the window.
 */
export class Meter {
  private constructor(
    private readonly admin: Redis,
    private readonly pids: number[],
    private readonly redisBefore: RedisCounters,
    private readonly clientBefore: number,
  ) {}

  static async start(admin: Redis, pids: number[] = []): Promise<Meter> {
    const redisBefore = await redisCounters(admin);
    return new Meter(admin, pids, redisBefore, clientCpuUs(pids));
  }

  /** The window's costs per event, as metrics named like `COSTS`. */
  async stop(events: number): Promise<Record<string, number>> {
    const client = clientCpuUs(this.pids) - this.clientBefore;
    const after = await redisCounters(this.admin);
    const redisUs = (after.cpuUs - this.redisBefore.cpuUs) / events;
    return {
      redisUs,
      clientUs: client / events,
      cpuUs: redisUs + client / events,
      cmds: (after.commands - this.redisBefore.commands) / events,
    };
  }
}

async function redisCounters(admin: Redis): Promise<RedisCounters> {
  const [cpu, stats] = await Promise.all([info(admin, 'cpu'), info(admin, 'commandstats')]);
  const seconds = (name: string): number => Number(cpu.get(`${name}_main_thread`) ?? cpu.get(name) ?? 0);
  let commands = 0;
  for (const [name, value] of stats) {
    if (name !== 'cmdstat_info') commands += Number(/calls=(\d+)/.exec(value)?.[1] ?? 0);
  }
  return { cpuUs: (seconds('used_cpu_user') + seconds('used_cpu_sys')) * 1e6, commands };
}

/** This process's CPU plus that of `pids` (user + system, µs). A pid that is gone counts nothing. */
function clientCpuUs(pids: number[]): number {
  const own = process.cpuUsage();
  let total = own.user + own.system;
  const tick = 1e6 / 100; // USER_HZ is 100 on Linux
  for (const pid of pids) {
    try {
      // Fields after the command name (which may hold spaces): utime and stime are the 12th and 13th.
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      total += (Number(rest[11]) + Number(rest[12])) * tick;
    } catch {
      // exited
    }
  }
  return total;
}
