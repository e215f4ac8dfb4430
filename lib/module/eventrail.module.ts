import { DynamicModule, Module, Provider } from '@nestjs/common';
import { DiscoveryModule } from '@nestjs/core';
import { EventrailAdmin } from '../admin/eventrail-admin';
import { EventrailConsumers } from '../consumer/lifecycle/eventrail-consumers';
import { EventrailExplorer } from '../discovery/eventrail.explorer';
import { EVENTRAIL_RETENTION } from '../admin/admin.types';
import { EVENTRAIL_OPTIONS, EVENTRAIL_RAW_OPTIONS } from '../config/eventrail.constants';
import { EventrailModuleAsyncOptions, EventrailModuleOptions, MODULE_DEFAULTS, resolveModuleOptions } from './eventrail.options';
import { EventrailPublisher } from '../publisher/eventrail.publisher';
import { EventrailRedis } from '../redis/eventrail-redis';
import { EventrailRetention } from '../retention/eventrail-retention';
import { EventrailCloudEvents } from '../cloudevents/eventrail-cloud-events';

const resolvedOptionsProvider: Provider = {
  provide: EVENTRAIL_OPTIONS,
  inject: [EVENTRAIL_RAW_OPTIONS],
  useFactory: (raw: EventrailModuleOptions) => resolveModuleOptions(raw),
};

const providers: Provider[] = [
  resolvedOptionsProvider,
  EventrailRedis,
  EventrailPublisher,
  EventrailConsumers,
  EventrailAdmin,
  EventrailExplorer,
  EventrailRetention,
  { provide: EVENTRAIL_RETENTION, useExisting: EventrailRetention },
  EventrailCloudEvents,
];
const exported = [EventrailPublisher, EventrailConsumers, EventrailAdmin, EVENTRAIL_OPTIONS, EventrailRetention, EventrailCloudEvents];

/**
 * A durable, partitioned event log on Redis Streams. Global by default, so
 * `EventrailPublisher` can be injected anywhere once imported.
 */
@Module({})
export class EventrailModule {
  static forRoot(options: EventrailModuleOptions = {}): DynamicModule {
    // Validate now as well, so a mistake points at the forRoot call.
    resolveModuleOptions(options);
    return {
      module: EventrailModule,
      global: options.isGlobal ?? MODULE_DEFAULTS.isGlobal,
      imports: [DiscoveryModule],
      providers: [{ provide: EVENTRAIL_RAW_OPTIONS, useValue: options }, ...providers],
      exports: exported,
    };
  }

  static forRootAsync(options: EventrailModuleAsyncOptions): DynamicModule {
    return {
      module: EventrailModule,
      global: options.isGlobal ?? MODULE_DEFAULTS.isGlobal,
      imports: [DiscoveryModule, ...(options.imports ?? [])],
      providers: [{ provide: EVENTRAIL_RAW_OPTIONS, inject: options.inject ?? [], useFactory: options.useFactory }, ...providers],
      exports: exported,
    };
  }
}
