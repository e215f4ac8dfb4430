import { Controller, DynamicModule, Module, Provider, Type, UseFilters, UseGuards } from '@nestjs/common';
import { DashboardAccessGuard } from './dashboard-access.guard';
import { DashboardApiController } from './dashboard-api.controller';
import { DashboardAssets } from './dashboard-assets';
import { DashboardErrorFilter } from './dashboard-error.filter';
import { DashboardRedisGuard } from './dashboard-redis.guard';
import { DashboardUiController } from './dashboard-ui.controller';
import { EventrailDashboardLink } from './eventrail-dashboard-link';
import { DASHBOARD_OPTIONS, DASHBOARD_RAW_OPTIONS } from './dashboard.constants';
import {
  EventrailDashboardAsyncOptions,
  EventrailDashboardOptions,
  resolveDashboardOptions,
  resolveDashboardPath,
} from './dashboard.options';

/**
 * The dashboard: a JSON API under `<path>/api/` over `EventrailAdmin` and a
 * single-page UI at `<path>`, served by the app itself (Express or Fastify).
 * Opt-in; needs `EventrailModule` imported (it is global by default).
 */
@Module({})
export class EventrailDashboardModule {
  static register(options: EventrailDashboardOptions = {}): DynamicModule {
    const resolved = resolveDashboardOptions(options); // fails at the register call, not at the first request
    return this.build(resolved.path, [{ provide: DASHBOARD_OPTIONS, useValue: resolved }]);
  }

  static registerAsync(options: EventrailDashboardAsyncOptions): DynamicModule {
    const path = resolveDashboardPath(options.path);
    const providers: Provider[] = [
      { provide: DASHBOARD_RAW_OPTIONS, inject: options.inject ?? [], useFactory: options.useFactory },
      {
        provide: DASHBOARD_OPTIONS,
        inject: [DASHBOARD_RAW_OPTIONS],
        useFactory: (raw: EventrailDashboardOptions) => resolveDashboardOptions({ ...raw, path }),
      },
    ];
    return { ...this.build(path, providers), imports: options.imports ?? [] };
  }

  private static build(path: string, providers: Provider[]): DynamicModule {
    return {
      module: EventrailDashboardModule,
      controllers: mountedControllers(path),
      providers: [
        ...providers,
        { provide: DashboardAssets, useFactory: () => new DashboardAssets() },
        DashboardAccessGuard,
        DashboardRedisGuard,
        EventrailDashboardLink,
      ],
      exports: [EventrailDashboardLink],
    };
  }
}

/** Controller paths are fixed by decorators, so each registration mounts subclasses at its own path. */
function mountedControllers(path: string): Type[] {
  class EventrailDashboardApi extends DashboardApiController {}
  class EventrailDashboardUi extends DashboardUiController {}
  Controller(`${path}/api`)(EventrailDashboardApi);
  // Access first: a caller without the token learns nothing, not even that Redis is down.
  UseGuards(DashboardAccessGuard, DashboardRedisGuard)(EventrailDashboardApi);
  UseFilters(DashboardErrorFilter)(EventrailDashboardApi);
  Controller(path)(EventrailDashboardUi);
  return [EventrailDashboardApi, EventrailDashboardUi];
}
