// Entry point `nestjs-eventrail/prometheus`: kept apart so prom-client stays an optional peer.
export { createPrometheusMetrics } from './metrics/prometheus.metrics';
export type { PrometheusMetricsOptions } from './metrics/prometheus.metrics';
