import { Module } from '@nestjs/common';
import { TerminusModule } from '@nestjs/terminus';
import { EventrailHealthIndicator } from './eventrail-health.indicator';

/**
 * Provides `EventrailHealthIndicator`. Import it next to `EventrailModule`
 * (global by default) and Terminus's `TerminusModule`, whose
 * `HealthCheckService` runs the check in your health controller.
 */
@Module({
  imports: [TerminusModule],
  providers: [EventrailHealthIndicator],
  exports: [EventrailHealthIndicator],
})
export class EventrailHealthModule {}
