import { Controller, Get } from '@nestjs/common';
import { HealthCheck, HealthCheckResult, HealthCheckService } from '@nestjs/terminus';
import { EventrailHealthIndicator } from 'nestjs-eventrail/health';

@Controller('health')
export class HealthController {
  constructor(
    private readonly health: HealthCheckService,
    private readonly eventrail: EventrailHealthIndicator,
  ) {}

  /** 200 with `status: "ok"` when eventrail is healthy, 503 with the reason per group otherwise. */
  @Get()
  @HealthCheck()
  check(): Promise<HealthCheckResult> {
    return this.health.check([
      () => this.eventrail.isHealthy('eventrail', { maxLag: 5000, maxDeadLetters: 100, timeoutMs: 1000, maxOutboxAgeMs: 60_000 }),
    ]);
  }
}
