import type { Registry } from 'prom-client';
import { InvalidOptionError } from '../errors/invalid-option.error';
import { checkObject, optionalInteger, optionNames, rejectUnknownKeys } from '../config/option-checks';
import { checkGroupList } from './group-lag.reader';

/** Options of the fleet-wide lag gauges (`EventrailLagMetricsModule`, `registerLagMetrics`). */
export interface LagMetricsOptions {
  /** Registry to register the gauges in. @default prom-client's global registry */
  registry?: Registry;
  /** Prefix of every metric name. @default 'eventrail_' */
  prefix?: string;
  /** Groups to export. @default every registered group */
  groups?: string[];
  /**
   * 0: every scrape reads Redis (scrapes that arrive together share one read).
   * Above 0: Redis is read on this schedule and scrapes answer from the latest
   * read, so the cost no longer grows with the number of scrapers.
   * @default 0
   */
  refreshMs?: number;
  /**
   * How long a read of Redis may take. Past it the scrape fails (and, with
   * `refreshMs`, the last read is dropped) rather than hang or repeat a number
   * that stopped moving; no further read is sent while that one is unanswered.
   * @default 5000
   */
  timeoutMs?: number;
}

export const LAG_METRICS_OPTION_NAMES = optionNames<LagMetricsOptions>()(['registry', 'prefix', 'groups', 'refreshMs', 'timeoutMs']);

export interface ResolvedLagMetricsOptions {
  registry?: Registry;
  prefix: string;
  groups: readonly string[] | undefined;
  refreshMs: number;
  timeoutMs: number;
}

/** A day: a longer schedule is a mistake (the gauges would say nothing useful). */
const MAX_REFRESH_MS = 24 * 60 * 60 * 1000;
/** Ten minutes: a scraper gives up long before that. */
const MAX_TIMEOUT_MS = 10 * 60 * 1000;
export const DEFAULT_LAG_TIMEOUT_MS = 5000;
const METRIC_PREFIX = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;

/** Checks the options once, at registration; defaults applied here and nowhere else. */
export function resolveLagMetricsOptions(options: LagMetricsOptions = {}): ResolvedLagMetricsOptions {
  checkObject('lagMetrics', options, 'an object');
  rejectUnknownKeys('lagMetrics', options, LAG_METRICS_OPTION_NAMES);
  const prefix = options.prefix ?? 'eventrail_';
  if (typeof prefix !== 'string' || !METRIC_PREFIX.test(prefix))
    throw new InvalidOptionError('lagMetrics.prefix', prefix, 'a Prometheus metric name prefix ([a-zA-Z_:][a-zA-Z0-9_:]*)');
  if (options.registry !== undefined) checkObject('lagMetrics.registry', options.registry, 'a prom-client Registry');
  return {
    registry: options.registry,
    prefix,
    groups: checkGroupList('lagMetrics.groups', options.groups),
    refreshMs: optionalInteger('lagMetrics.refreshMs', options.refreshMs, 0, MAX_REFRESH_MS) ?? 0,
    timeoutMs: optionalInteger('lagMetrics.timeoutMs', options.timeoutMs, 1, MAX_TIMEOUT_MS) ?? DEFAULT_LAG_TIMEOUT_MS,
  };
}
