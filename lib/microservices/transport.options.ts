import { CONSUMER_OPTION_NAMES, validateGroupName, type ConsumerOptions } from '../consumer/consumer.options';
import { resolveModuleOptions, type EventrailModuleOptions, type ResolvedEventrailOptions } from '../module/eventrail.options';
import { checkObject, rejectUnknownKeys } from '../config/option-checks';

/** The log options both ends of the transport need: where it is and how it is laid out. */
type LogOptions = Pick<EventrailModuleOptions, 'redis' | 'prefix' | 'partitions' | 'startupTimeoutMs' | 'requireNoEviction' | 'tracing'>;

/**
 * Options of `new EventrailServer(...)`: the log, the consumer group its
 * `@EventPattern` handlers form, and that group's consumer options (the same
 * as `@OnEvent`'s, with the same defaults).
 */
export interface EventrailServerOptions extends LogOptions, ConsumerOptions {
  /** Consumer group of this microservice's handlers. Every process with the same group shares the work. */
  group: string;
  /** Hooks called as messages are processed, as the module's `metrics`. */
  metrics?: EventrailModuleOptions['metrics'];
}

/** Options of `EventrailClient` (`ClientsModule.register([{ name, customClass: EventrailClient, options }])`). */
export type EventrailClientOptions = LogOptions &
  Pick<EventrailModuleOptions, 'durability' | 'replication' | 'maxPayloadBytes' | 'dedupWindowMs'>;

const LOG_OPTION_NAMES = Object.keys({
  redis: true,
  prefix: true,
  partitions: true,
  startupTimeoutMs: true,
  requireNoEviction: true,
  tracing: true,
} satisfies Record<keyof LogOptions, true>);
export const SERVER_OPTION_NAMES = [...LOG_OPTION_NAMES, 'group', 'metrics', ...CONSUMER_OPTION_NAMES];
export const CLIENT_OPTION_NAMES = [...LOG_OPTION_NAMES, 'durability', 'replication', 'maxPayloadBytes', 'dedupWindowMs'];

/** Module options for a server: validated like `forRoot`'s, the consumer options as the group's. */
export function resolveServerOptions(options: EventrailServerOptions): { group: string; resolved: ResolvedEventrailOptions } {
  checkObject('EventrailServer options', options, 'an object with at least { group }');
  rejectUnknownKeys('', options, SERVER_OPTION_NAMES);
  validateGroupName('group', options.group);
  const consumer: Record<string, unknown> = {};
  const log: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(options)) {
    if ((CONSUMER_OPTION_NAMES as readonly string[]).includes(key)) consumer[key] = value;
    else if (key !== 'group') log[key] = value;
  }
  // The handlers start when Nest calls listen(), not on a module bootstrap.
  const resolved = resolveModuleOptions({ ...log, consumer, autoStart: false });
  return { group: options.group, resolved };
}

export function resolveClientOptions(options: EventrailClientOptions = {}): ResolvedEventrailOptions {
  checkObject('EventrailClient options', options, 'an object');
  rejectUnknownKeys('', options, CLIENT_OPTION_NAMES);
  return resolveModuleOptions({ ...options, autoStart: false });
}
