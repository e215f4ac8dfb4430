import { Inject, Injectable } from '@nestjs/common';
import { EVENTRAIL_OPTIONS } from '../config/eventrail.constants';
import type { EventrailMessage } from '../events/eventrail-message';
import type { CloudEventsView } from './cloud-events-source.options';
import { EventrailPublisher, type PublishResult } from '../publisher/eventrail.publisher';
import { fromCloudEvent, fromCloudEvents, toCloudEvent, type CloudEventPublishInput, type EventrailCloudEvent } from './cloud-event.codec';

/**
 * The CloudEvents codec with the module's `cloudEvents.source`, and
 * publishing of CloudEvents: injectable wherever `EventrailPublisher` is.
 */
@Injectable()
export class EventrailCloudEvents {
  constructor(
    private readonly publisher: EventrailPublisher,
    @Inject(EVENTRAIL_OPTIONS) private readonly options: CloudEventsView,
  ) {}

  /** The CloudEvent of a message, with `source` from `cloudEvents.source` (unless it came in as a CloudEvent with its own). */
  toCloudEvent(message: EventrailMessage): EventrailCloudEvent {
    return toCloudEvent(message, { source: this.options.cloudEvents.source });
  }

  fromCloudEvent(event: unknown): CloudEventPublishInput {
    return fromCloudEvent(event);
  }

  /**
   * Validates every CloudEvent first (`InvalidCloudEventError` names the first bad attribute, and nothing is
   * appended), then publishes them in one `publishMany`, in order.
   */
  publish(events: readonly unknown[]): Promise<PublishResult[]> {
    return this.publisher.publishMany(fromCloudEvents(events));
  }
}
