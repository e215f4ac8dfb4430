// Entry point `nestjs-eventrail/prometheus`: kept apart so prom-client stays an optional peer.
export { createPrometheusMetrics } from './metrics/prometheus.metrics';
export type { PrometheusMetricsOptions } from './metrics/prometheus.metrics';
export { EventrailLagMetricsModule } from './metrics/eventrail-lag-metrics.module';
export type { EventrailLagMetricsAsyncOptions } from './metrics/eventrail-lag-metrics.module';
export { registerLagMetrics } from './metrics/lag.prometheus';
export type { LagMetrics } from './metrics/lag.prometheus';
export type { LagMetricsOptions } from './metrics/lag-metrics.options';
export { LagMetricsClashError } from './metrics/lag-metrics-clash.error';
export { LagReadTimeoutError } from './metrics/lag-read-timeout.error';
