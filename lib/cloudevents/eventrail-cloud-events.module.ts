import { Controller, DynamicModule, Module, Type, UseFilters, UseGuards } from '@nestjs/common';
import { CloudEventsAccessGuard } from './cloud-events-access.guard';
import { CloudEventsBodyParsers } from './cloud-events-body-parsers';
import { CloudEventsErrorFilter } from './cloud-events-error.filter';
import { CLOUD_EVENTS_OPTIONS } from './cloud-events.constants';
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
      providers: [{ provide: CLOUD_EVENTS_OPTIONS, useValue: resolved }, CloudEventsAccessGuard, CloudEventsBodyParsers],
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
