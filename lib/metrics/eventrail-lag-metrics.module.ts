import {
  DynamicModule,
  FactoryProvider,
  Inject,
  Injectable,
  Module,
  OnApplicationShutdown,
  OnModuleInit,
  Provider,
  type ModuleMetadata,
} from '@nestjs/common';
import { EventrailAdmin } from '../admin/eventrail-admin';
import { type LagMetrics, registerLagMetrics } from './lag.prometheus';
import { type LagMetricsOptions, resolveLagMetricsOptions } from './lag-metrics.options';

const LAG_METRICS_OPTIONS = Symbol('EVENTRAIL_LAG_METRICS_OPTIONS');

export interface EventrailLagMetricsAsyncOptions extends Pick<ModuleMetadata, 'imports'> {
  inject?: FactoryProvider['inject'];
  useFactory: (...args: never[]) => LagMetricsOptions | Promise<LagMetricsOptions>;
}

/** Registers the gauges when the module starts and stops their schedule at shutdown. */
@Injectable()
class LagMetricsLifecycle implements OnModuleInit, OnApplicationShutdown {
  private metrics?: LagMetrics;

  constructor(
    private readonly admin: EventrailAdmin,
    @Inject(LAG_METRICS_OPTIONS) private readonly options: LagMetricsOptions,
  ) {}

  onModuleInit(): void {
    this.metrics = registerLagMetrics(this.admin, this.options);
  }

  onApplicationShutdown(): void {
    this.metrics?.stop();
  }
}

/**
 * Fleet-wide lag gauges per group for Prometheus (see `registerLagMetrics`),
 * read from Redis whether or not a worker of the group runs here. Needs
 * `EventrailModule` imported (global by default) and `prom-client`.
 */
@Module({})
export class EventrailLagMetricsModule {
  static register(options: LagMetricsOptions = {}): DynamicModule {
    resolveLagMetricsOptions(options); // a mistake points at the register call
    return { module: EventrailLagMetricsModule, providers: [{ provide: LAG_METRICS_OPTIONS, useValue: options }, LagMetricsLifecycle] };
  }

  static registerAsync(options: EventrailLagMetricsAsyncOptions): DynamicModule {
    const provider: Provider = { provide: LAG_METRICS_OPTIONS, inject: options.inject ?? [], useFactory: options.useFactory };
    return { module: EventrailLagMetricsModule, imports: options.imports ?? [], providers: [provider, LagMetricsLifecycle] };
  }
}
