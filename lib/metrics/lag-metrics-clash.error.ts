import { EventrailError } from '../errors/eventrail.error';

/**
 * A second lag-gauge registration on a registry and prefix that already
 * export gauges with other settings. Merging would give one set of series two
 * schedules and two group lists; ignoring it would hide the second's groups.
 */
export class LagMetricsClashError extends EventrailError {
  constructor(
    readonly prefix: string,
    readonly setting: string,
    readonly registered: unknown,
    readonly requested: unknown,
  ) {
    super(
      `The lag gauges "${prefix}group_*" are already registered on this registry with ${setting} ${JSON.stringify(registered)}; ` +
        `this registration asks for ${JSON.stringify(requested)}: use another registry or prefix, or the same ${setting}`,
    );
  }
}
