// Entry point `nestjs-eventrail/health`: kept apart so @nestjs/terminus stays an optional peer.
export { EventrailHealthIndicator, DEFAULT_HEALTH_TIMEOUT_MS } from './health/eventrail-health.indicator';
export type { EventrailHealthOptions } from './health/eventrail-health.indicator';
export { EventrailHealthModule } from './health/eventrail-health.module';
export type { GroupHealth } from './health/group-health';
