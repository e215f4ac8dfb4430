import { createRequire } from 'node:module';
import type { ModuleRef } from '@nestjs/core';
import type { SchedulerRegistry } from '@nestjs/schedule';
import { InvalidOptionError } from '../errors/invalid-option.error';
import { importOptionalPeer } from '../util/optional-peer';
import { ScheduleModuleMissingError } from '../errors/schedule-module-missing.error';
import type { RetentionSchedule } from './retention.options';
import { describeError } from '../util/describe-error';

/** The part of `cron`'s `CronJob` used here; `cron` comes with `@nestjs/schedule`. */
interface CronJobLike {
  start(): void;
  stop(): unknown;
}
interface CronModule {
  CronJob: { from(params: { cronTime: string; onTick: () => void; start: boolean }): CronJobLike };
}

export interface RetentionJob {
  stop(): void;
}

/**
 * Registers the retention job in the application's `SchedulerRegistry`, so it
 * shows up with the app's other jobs. `@nestjs/schedule` is an optional peer:
 * it is imported here, at startup, only when retention is enabled, and an app
 * that did not install it or did not import `ScheduleModule.forRoot()` fails
 * with `ScheduleModuleMissingError`.
 */
export class RetentionScheduler {
  private constructor(private readonly registry: SchedulerRegistry) {}

  static async resolve(moduleRef: ModuleRef): Promise<RetentionScheduler> {
    const schedule = await importOptionalPeer(
      () => import('@nestjs/schedule'),
      () => new ScheduleModuleMissingError('not-installed'),
    );
    let registry: SchedulerRegistry | undefined;
    try {
      registry = moduleRef.get(schedule.SchedulerRegistry, { strict: false });
    } catch {
      registry = undefined; // not registered in this application
    }
    if (!registry) throw new ScheduleModuleMissingError('not-imported');
    return new RetentionScheduler(registry);
  }

  schedule(name: string, schedule: RetentionSchedule, tick: () => void): RetentionJob {
    const { registry } = this;
    if (schedule.kind === 'interval') {
      registry.addInterval(name, setInterval(tick, schedule.ms));
      return { stop: () => registry.doesExist('interval', name) && registry.deleteInterval(name) };
    }
    const job = this.cronJob(schedule.expression, tick);
    registry.addCronJob(name, job as unknown as Parameters<SchedulerRegistry['addCronJob']>[1]);
    job.start();
    return {
      stop: () => {
        job.stop();
        if (registry.doesExist('cron', name)) registry.deleteCronJob(name);
      },
    };
  }

  private cronJob(expression: string, tick: () => void): CronJobLike {
    // `cron` is a dependency of @nestjs/schedule, not of eventrail: load it from there.
    const { CronJob } = createRequire(require.resolve('@nestjs/schedule'))('cron') as CronModule;
    try {
      return CronJob.from({ cronTime: expression, onTick: tick, start: false });
    } catch (error) {
      throw new InvalidOptionError('retention.every', expression, `a valid cron expression (${describeError(error)})`);
    }
  }
}
