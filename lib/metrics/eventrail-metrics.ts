import { Logger } from '@nestjs/common';
import { InvalidOptionError } from '../errors/invalid-option.error';
import { describeError, errorStack } from '../util/describe-error';
import { checkObject } from '../config/option-checks';
import { escapeControls } from '../util/control-chars';

/** Why an entry was passed over without a handler call. */
export type SkipReason = 'duplicate' | 'no-handler';

/**
 * Hooks the consumer calls as it works, for metrics. All optional; each is
 * called synchronously on the consumer's path, so keep them cheap. A hook that
 * throws is logged and never breaks consuming.
 */
export interface EventrailMetrics {
  /** A message's handlers all succeeded; `durationMs` covers every attempt. */
  onMessageProcessed?(group: string, event: string, durationMs: number): void;
  /** One handler attempt failed (it may be retried). */
  onHandlerError?(group: string, event: string, error: unknown, attempt: number): void;
  /** A message was written to the dead-letter stream; `id` is the dead letter's id. */
  onMessageDeadLettered?(group: string, event: string, offset: string, id: string): void;
  /** Entries after the committed offset of a partition this process works, sampled every heartbeat. */
  onLag?(group: string, partition: number, lag: number): void;
  onLeaseAcquired?(group: string, partition: number): void;
  onLeaseLost?(group: string, partition: number): void;
  /** This process handed a partition back (rebalance, shutdown) and no longer works it. */
  onLeaseReleased?(group: string, partition: number): void;
  /**
   * Redis came back without the log (a restart without persistence, a FLUSHALL): a worker of this process
   * found the log's metadata changed or gone while it knew the group's offsets. Its groups resume from the
   * start of the new log; the health check is down for 5 minutes after it.
   */
  onLogLost?(): void;
  /** An entry was passed over: already done (idempotency) or no handler for its event in this group. */
  onMessageSkipped?(group: string, reason: SkipReason, offset: string): void;
  /** The outbox relay appended a batch of `relayed` rows, `duplicates` of them already in the log (dedup). */
  onOutboxRelayed?(table: string, relayed: number, duplicates: number): void;
  /** The active outbox relay's sample of its table, every `relay.pollIntervalMs`: rows waiting and the oldest one's age (0 when none). */
  onOutboxStatus?(table: string, depth: number, oldestAgeMs: number): void;
}

type Hook = keyof EventrailMetrics;

/** Calls the application's hooks, catching and logging (once per hook) whatever they throw. */
export class MetricsHooks {
  private readonly logger = new Logger('EventrailMetrics');
  private readonly reported = new Set<Hook>();
  readonly wantsDuration: boolean;
  readonly wantsLag: boolean;
  readonly wantsSkips: boolean;

  constructor(private readonly hooks: EventrailMetrics = {}) {
    this.wantsDuration = typeof hooks.onMessageProcessed === 'function';
    this.wantsLag = typeof hooks.onLag === 'function';
    this.wantsSkips = typeof hooks.onMessageSkipped === 'function';
  }

  emit<K extends Hook>(hook: K, ...args: Parameters<NonNullable<EventrailMetrics[K]>>): void {
    const fn = this.hooks[hook] as ((...a: unknown[]) => void) | undefined;
    if (!fn) return;
    try {
      fn.apply(this.hooks, args);
    } catch (error) {
      if (this.reported.has(hook)) return;
      this.reported.add(hook);
      // A hook's error may carry what it was given (an event name, a group): producers' text, escaped.
      this.logger.error(
        `metrics.${hook} threw (reported once, consuming goes on): ${escapeControls(describeError(error))}`,
        errorStack(error),
      );
    }
  }
}

/** Validates the module option `metrics` (every hook given is a function); `{}` when left out. */
export function resolveMetricsOption(metrics: EventrailMetrics | undefined): EventrailMetrics {
  const hooks = metrics ?? {};
  checkObject('metrics', hooks, 'an object of hook functions');
  for (const [name, hook] of Object.entries(hooks)) {
    if (hook !== undefined && typeof hook !== 'function') throw new InvalidOptionError(`metrics.${name}`, hook, 'a function');
  }
  return hooks;
}
