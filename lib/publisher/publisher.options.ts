import type { ResolvedLogOptions } from '../config/log.options';
import type { ResolvedConnectionOptions } from '../redis/connection.options';
import type { ResolvedTracingOptions } from '../tracing/tracing.options';
import { checkInteger, optionNames } from '../config/option-checks';

/** The module options about what `publish` accepts and how it appends. */
export interface PublisherOptions {
  /**
   * Largest accepted `data`, in bytes of its JSON.
   * @default 1048576
   */
  maxPayloadBytes?: number;
  /**
   * Producer dedup: a publish with an explicit `id` appends once per id (and partition) within this window,
   * however often it is called; later calls return the first append's offset. 0 turns dedup off.
   * @default 0
   */
  dedupWindowMs?: number;
  /**
   * Longest wait for Redis's answer to a publish, in ms; then the call rejects with `PublishTimeoutError`
   * (the event may or may not have been appended). Bounds a connection that drops packets without a reset,
   * which stays connected and would hold the call for minutes. With `durability: 'replicated'`,
   * `replication.timeoutMs` is added for the `WAIT`. Keep it above `replication.timeoutMs` when some calls
   * ask for replicas: a `WAIT` holds the commands sent after it on the connection until it returns.
   * @default 10000
   */
  publishTimeoutMs?: number;
}

export type ResolvedPublisherOptions = Required<PublisherOptions>;

export const PUBLISHER_OPTION_NAMES = optionNames<PublisherOptions>()(['maxPayloadBytes', 'dedupWindowMs', 'publishTimeoutMs']);

export const PUBLISHER_DEFAULTS: ResolvedPublisherOptions = Object.freeze({
  maxPayloadBytes: 1024 * 1024,
  dedupWindowMs: 0,
  publishTimeoutMs: 10_000,
});

/** What `EventrailPublisher` reads of the resolved module options. */
export type PublisherView = ResolvedLogOptions &
  ResolvedPublisherOptions &
  Pick<ResolvedConnectionOptions, 'durability' | 'replication'> & { tracing: ResolvedTracingOptions };

export function resolvePublisherOptions(options: PublisherOptions): ResolvedPublisherOptions {
  return {
    maxPayloadBytes: checkInteger('maxPayloadBytes', options.maxPayloadBytes ?? PUBLISHER_DEFAULTS.maxPayloadBytes, 1, 512 * 1024 * 1024),
    dedupWindowMs: checkInteger('dedupWindowMs', options.dedupWindowMs ?? PUBLISHER_DEFAULTS.dedupWindowMs, 0, 30 * 86_400_000),
    publishTimeoutMs: checkInteger('publishTimeoutMs', options.publishTimeoutMs ?? PUBLISHER_DEFAULTS.publishTimeoutMs, 1, 3_600_000),
  };
}
