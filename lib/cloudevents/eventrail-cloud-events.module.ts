import { Controller, DynamicModule, Module, Type, UseFilters, UseGuards } from '@nestjs/common';
import { ModuleRef } from '@nestjs/core';
import { CloudEventsAccessGuard } from './cloud-events-access.guard';
import { CloudEventsBodyReader } from './cloud-events-body-reader';
import { CloudEventsErrorFilter } from './cloud-events-error.filter';
import { CLOUD_EVENTS_OPTIONS, CLOUD_EVENTS_PUBLISHER } from './cloud-events.constants';
import { EVENTRAIL_OPTIONS } from '../config/eventrail.constants';
import { EventrailRedis } from '../redis/eventrail-redis';
import { EventrailPublisher } from '../publisher/eventrail.publisher';
import { resolveCloudEventsOptions, type EventrailCloudEventsOptions } from './cloud-events-ingress.options';
import { EventrailCloudEventsController } from './eventrail-cloud-events.controller';

/**
 * An HTTP ingress for CloudEvents (binary, structured and batch mode) that
 * appends them to the log, so a service without Redis access (another
 * language, a webhook source such as Knative or Event Grid) can publish.
 * Opt-in; needs `EventrailModule` imported (global by default); Express or
 * Fastify.
 */
@Module({})
export class EventrailCloudEventsModule {
  static register(options: EventrailCloudEventsOptions = {}): DynamicModule {
    const resolved = resolveCloudEventsOptions(options); // fails at the register call, not at the first request
    return {
      module: EventrailCloudEventsModule,
      controllers: [mounted(resolved.path)],
      providers: [
        { provide: CLOUD_EVENTS_OPTIONS, useValue: resolved },
        {
          provide: CLOUD_EVENTS_PUBLISHER,
          inject: [ModuleRef, EVENTRAIL_OPTIONS],
          // A publisher configured as the app's, on its connection, with the ingress's dedup window; made at the
          // first request, when the connection provider is the instance the app initialised.
          useFactory: (moduleRef: ModuleRef, options: ConstructorParameters<typeof EventrailPublisher>[1]) => {
            let publisher: EventrailPublisher | undefined;
            return (): EventrailPublisher =>
              (publisher ??= new EventrailPublisher(moduleRef.get(EventrailRedis, { strict: false }), {
                ...options,
                dedupWindowMs: resolved.dedupWindowMs,
              }));
          },
        },
        CloudEventsAccessGuard,
        CloudEventsBodyReader,
      ],
    };
  }
}

/** The path is fixed by a decorator, so each registration mounts a subclass at its own. */
function mounted(path: string): Type {
  class EventrailCloudEventsIngress extends EventrailCloudEventsController {}
  Controller(path)(EventrailCloudEventsIngress);
  UseGuards(CloudEventsAccessGuard)(EventrailCloudEventsIngress);
  UseFilters(CloudEventsErrorFilter)(EventrailCloudEventsIngress);
  return EventrailCloudEventsIngress;
}
