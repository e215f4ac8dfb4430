import type { ResolvedLogOptions } from '../config/log.options';
import { InvalidOptionError } from '../errors/invalid-option.error';
import { checkObject, optionNames, rejectUnknownKeys } from '../config/option-checks';

/** Module option `cloudEvents`: what `EventrailCloudEvents.toCloudEvent` writes as `source`. */
export interface CloudEventsSourceOptions {
  /**
   * The CloudEvents `source` (a URI-reference) of events this app's log hands out as CloudEvents.
   * @default `/eventrail/<prefix>`
   */
  source?: string;
}

export type ResolvedCloudEventsSourceOptions = Required<CloudEventsSourceOptions>;

export const CLOUD_EVENTS_SOURCE_OPTION_NAMES = optionNames<CloudEventsSourceOptions>()(['source']);

/** What `EventrailCloudEvents` reads of the resolved module options. */
export type CloudEventsView = { cloudEvents: ResolvedCloudEventsSourceOptions };

/** Applies the default `source` (derived from the log's `prefix`) and validates it. */
export function resolveCloudEventsSourceOptions(
  options: CloudEventsSourceOptions | undefined,
  log: Pick<ResolvedLogOptions, 'prefix'>,
): ResolvedCloudEventsSourceOptions {
  const given = options ?? {};
  checkObject('cloudEvents', given, 'an object: { source? }');
  rejectUnknownKeys('cloudEvents', given, CLOUD_EVENTS_SOURCE_OPTION_NAMES);
  const source = given.source ?? `/eventrail/${log.prefix}`;
  // A URI-reference: no spaces or control characters, not empty.
  // eslint-disable-next-line no-control-regex
  if (typeof source !== 'string' || !/^[^\s\u0000-\u001f\u007f]{1,2048}$/.test(source)) {
    throw new InvalidOptionError(
      'cloudEvents.source',
      source,
      'a non-empty URI-reference such as "https://shop.example/orders" or "/orders"',
    );
  }
  return { source };
}
