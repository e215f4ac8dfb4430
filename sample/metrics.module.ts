import { Global, Module } from '@nestjs/common';
import { collectDefaultMetrics, Registry } from 'prom-client';

/**
 * One prom-client registry for the app, injectable by its class: eventrail's
 * metrics hooks write to it and `GET /metrics` reads it. A registry of its own
 * (rather than prom-client's global one) keeps the app's metrics explicit.
 */
@Global()
@Module({
  providers: [
    {
      provide: Registry,
      useFactory: (): Registry => {
        const registry = new Registry();
        collectDefaultMetrics({ register: registry });
        return registry;
      },
    },
  ],
  exports: [Registry],
})
export class MetricsModule {}
