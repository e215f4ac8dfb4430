import { EventrailError } from './eventrail.error';

/**
 * `retention.enabled` is true, but the scheduler it runs on is not there: the
 * application did not import `ScheduleModule.forRoot()` from
 * `@nestjs/schedule`, or that package is not installed. Thrown at startup.
 */
export class ScheduleModuleMissingError extends EventrailError {
  constructor(readonly reason: 'not-installed' | 'not-imported') {
    super(
      reason === 'not-installed'
        ? 'retention.enabled is true but @nestjs/schedule is not installed: npm install @nestjs/schedule, ' +
            'then add ScheduleModule.forRoot() to the imports of your root module (or set retention.enabled to false)'
        : 'retention.enabled is true but SchedulerRegistry is not available: add ScheduleModule.forRoot() from ' +
            '@nestjs/schedule to the imports of your root module (eventrail never calls it itself), or set retention.enabled to false',
    );
  }
}
