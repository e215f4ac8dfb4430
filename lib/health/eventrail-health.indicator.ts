import { Injectable, Optional } from '@nestjs/common';
import { HealthIndicatorResult, HealthIndicatorService } from '@nestjs/terminus';
import type { GroupStatus, NodeStatus } from '../admin/admin.types';
import { EventrailAdmin } from '../admin/eventrail-admin';
import { EventrailConsumers } from '../consumer/lifecycle/eventrail-consumers';
import { LogLoss, LogLossWatch } from '../consumer/coordination/log-loss-watch';
import type { NodeEvictionPolicy } from '../errors/eviction-policy.error';
import { InvalidOptionError } from '../errors/invalid-option.error';
import { UnknownGroupError } from '../errors/unknown-group.error';
import { EventrailOutboxAdmin } from '../outbox/eventrail-outbox-admin';
import { describeError } from '../util/describe-error';
import { checkInteger, checkObject, optionalInteger, rejectUnknownKeys } from '../config/option-checks';
import { withTimeout } from '../util/timeout';
import { evaluateGroup, GroupHealth, GroupLimits } from './group-health';
import { StallTracker } from './stall-tracker';

/** How long a health check waits for Redis by default, like Terminus's own indicators. */
export const DEFAULT_HEALTH_TIMEOUT_MS = 1000;

/**
 * How long the check stays `down` after this process found that Redis came
 * back without the log: long enough for a probe or an alert on it to fire,
 * short enough that the workers, which go on from the start of the new log,
 * are not held out of service for good. Afterwards a warning stays.
 */
export const LOG_LOST_DOWN_MS = 5 * 60_000;

export interface EventrailHealthOptions {
  /**
   * Most entries a group may have after its committed offsets (summed over its
   * partitions); more and the check is `down`. Lag is exact from the
   * committed offsets' positions; where one is unknown and the lag is
   * counted, it is a lower bound when the partition holds more than
   * `LAG_COUNT_CAP` entries on both sides of its offset, so keep the limit
   * below it.
   * @default no limit
   */
  maxLag?: number;
  /** Most dead letters a group may have; more and the check is `down`. @default no limit */
  maxDeadLetters?: number;
  /**
   * A partition whose committed offset has not moved for longer than this
   * while it has lag is `stalled`, and its group `down` (a handler that never
   * settles, a retry loop). Measured between checks of this indicator, from
   * the first check that saw the partition with lag at that offset. Offsets
   * move once per batch, so keep it above `batchSize` × the slowest normal
   * handler time, and above the longest retry cycle.
   * @default no check
   */
  maxStallMs?: number;
  /** How long Redis has to answer the whole check before it is `down`. @default 1000 */
  timeoutMs?: number;
  /**
   * Oldest age a waiting outbox row may have (`nestjs-eventrail/outbox`); older and the check is `down`
   * (no active relay, or Redis refusing its appends). The database has `timeoutMs` to answer too.
   * @default no outbox check
   */
  maxOutboxAgeMs?: number;
  /**
   * Longest a parked head (`ordering: 'key'` or `'unordered'`) may have been failing, from its first
   * failure on Redis's clock; longer and its group is `down`, naming the partition and key. A head is
   * dead-lettered after `redelivery.maxAgeMs` (1 h by default), so keep this below that to hear of it
   * while it still holds its key back.
   * @default no check
   */
  maxParkedAgeMs?: number;
}

export const OPTION_NAMES = ['maxLag', 'maxDeadLetters', 'maxStallMs', 'timeoutMs', 'maxOutboxAgeMs', 'maxParkedAgeMs'] as const;
const TIMED_OUT = Symbol('timed out');

interface Inspection {
  groups: Record<string, GroupHealth>;
  nodes: NodeStatus[];
  evictionPolicies: NodeEvictionPolicy[];
}

/**
 * Terminus health indicator for eventrail. `up` when Redis answers within the
 * timeout and every group consumed in this process has a running worker, a
 * live lease on each of its partitions (held by any live member of the group,
 * in this process or another), lag, dead letters and parked heads' age within
 * the limits and no stalled partition, and no loss of the log found by this process in the
 * last `LOG_LOST_DOWN_MS`. Anything else is reported as `down` with details per
 * group, never thrown, so the health endpoint answers 503 with the reason.
 *
 * Its own work is bounded: at its timeout it aborts its reads (no lag page is
 * read after it), and a probe that comes while an earlier check's commands
 * are still unanswered waits for them instead of sending more, so a slow
 * Redis sees at most one check's commands at a time, however often it is probed.
 */
@Injectable()
export class EventrailHealthIndicator {
  private readonly stalls = new StallTracker();
  /** The inspection whose commands may still be outstanding, even after its check gave up. */
  private inFlight: Promise<unknown> | null = null;

  constructor(
    private readonly health: HealthIndicatorService,
    private readonly consumers: EventrailConsumers,
    private readonly admin: EventrailAdmin,
    @Optional() private readonly outboxAdmin?: EventrailOutboxAdmin,
  ) {}

  async isHealthy<const Key extends string = 'eventrail'>(
    key: Key = 'eventrail' as Key,
    options: EventrailHealthOptions = {},
  ): Promise<HealthIndicatorResult<Key>> {
    const { timeoutMs, maxOutboxAgeMs, ...limits } = validate(options);
    if (maxOutboxAgeMs !== undefined && !this.outboxAdmin) {
      throw new InvalidOptionError('health.maxOutboxAgeMs', maxOutboxAgeMs, 'EventrailOutboxModule imported in the app');
    }
    const indicator = this.health.check(key);
    // Not connected (reconnecting, closed): say so at once rather than wait out the timeout.
    const status = this.admin.connectionStatus();
    if (status !== 'ready') return indicator.down({ message: `Redis is not connected (connection ${status})` });

    const started = Date.now();
    const abort = new AbortController();
    const turn = { waited: false };
    let inspected: Inspection | typeof TIMED_OUT;
    try {
      inspected = await withTimeout(this.inspectInTurn(limits, abort.signal, turn), timeoutMs, () => {
        abort.abort(new Error(`health check timed out after ${timeoutMs} ms`));
        return TIMED_OUT;
      });
    } catch (error) {
      return indicator.down({ message: `Redis did not answer: ${describeError(error)}`, responseTimeMs: Date.now() - started });
    }
    if (inspected === TIMED_OUT) {
      const pending = turn.waited ? " (an earlier check's commands are still unanswered)" : '';
      return indicator.down({ message: `Redis did not answer within ${timeoutMs} ms${pending}`, timeoutMs });
    }

    const { groups, nodes, evictionPolicies } = inspected;
    const loss = LogLossWatch.lastLossOf(this.consumers.workerId);
    const lossText = loss && describeLoss(loss);
    const lostLately = loss !== undefined && Date.now() - loss.at.getTime() < LOG_LOST_DOWN_MS;
    const warnings = [...evictionWarnings(evictionPolicies), ...(lossText && !lostLately ? [lossText] : [])];
    const data = {
      responseTimeMs: Date.now() - started,
      workerId: this.consumers.workerId,
      groups,
      nodes,
      evictionPolicies,
      ...(loss ? { logLost: loss } : {}),
      ...(warnings.length > 0 ? { warnings } : {}),
    };
    const problems = Object.entries(groups).flatMap(([name, group]) => group.problems.map((problem) => `${name}: ${problem}`));
    if (lossText && lostLately) problems.unshift(lossText);
    if (maxOutboxAgeMs !== undefined) {
      const outbox = await this.checkOutbox(maxOutboxAgeMs, timeoutMs);
      Object.assign(data, { outbox: outbox.data });
      if (outbox.problem) problems.push(outbox.problem);
    }
    return problems.length === 0 ? indicator.up(data) : indicator.down({ message: problems.join('; '), ...data });
  }

  /**
   * One inspection at a time: while an earlier one still has commands out (a
   * slow or stopped Redis), wait for it rather than add a second batch behind it.
   */
  private async inspectInTurn(limits: GroupLimits, signal: AbortSignal, turn: { waited: boolean }): Promise<Inspection> {
    while (this.inFlight !== null) {
      turn.waited = true;
      await this.inFlight.catch(() => undefined);
      signal.throwIfAborted();
    }
    const run = this.inspect(limits, signal);
    this.inFlight = run;
    const clear = (): void => {
      if (this.inFlight === run) this.inFlight = null;
    };
    void run.then(clear, clear);
    return run;
  }

  /**
   * PING, the status of every group of this process, which primary holds
   * which partitions and their eviction policy, in parallel: one timeout
   * covers them all, and `signal` stops the group reads.
   */
  private async inspect(limits: GroupLimits, signal: AbortSignal): Promise<Inspection> {
    const names = this.consumers.groupNames().sort();
    const ownership = this.consumers.ownership();
    const running = this.consumers.isRunning;
    const workerId = this.consumers.workerId;
    const [, statuses, nodes, evictionPolicies] = await Promise.all([
      this.admin.ping(),
      Promise.all(names.map((name) => this.readGroup(name, signal))),
      this.admin.nodes(),
      this.admin.evictionPolicies(),
    ]);
    this.stalls.retain(names);
    const groups = Object.fromEntries(
      names.map((name, i) => {
        const standstills = this.stalls.observe(name, statuses[i]?.partitions ?? []);
        return [name, evaluateGroup(statuses[i], { running, workerId, ownedHere: ownership[name] ?? [] }, limits, standstills)];
      }),
    );
    return { groups, nodes, evictionPolicies };
  }

  /** The outbox table's depth and oldest row, against `maxOutboxAgeMs`; a database that does not answer is a problem too. */
  private async checkOutbox(maxAgeMs: number, timeoutMs: number): Promise<{ data: unknown; problem?: string }> {
    const admin = this.outboxAdmin as EventrailOutboxAdmin;
    try {
      const status = await withTimeout(admin.status(), timeoutMs, (): typeof TIMED_OUT => TIMED_OUT);
      if (status === TIMED_OUT) return { data: null, problem: `outbox: the database did not answer within ${timeoutMs} ms` };
      const tooOld = status.oldestAgeMs !== null && status.oldestAgeMs > maxAgeMs;
      return { data: status, problem: tooOld ? `outbox: oldest row waits ${status.oldestAgeMs} ms, over ${maxAgeMs}` : undefined };
    } catch (error) {
      return { data: null, problem: `outbox: ${describeError(error)}` };
    }
  }

  private readGroup(name: string, signal: AbortSignal): Promise<GroupStatus | null> {
    return this.admin.group(name, { signal }).catch((error: unknown) => {
      if (error instanceof UnknownGroupError) return null;
      throw error;
    });
  }
}

function describeLoss(loss: LogLoss): string {
  return (
    `the log vanished at ${loss.at.toISOString()} (Redis came back without it: no persistence?); ` +
    `groups ${loss.groups.join(', ')} resumed from the start of the new log`
  );
}

function evictionWarnings(policies: readonly NodeEvictionPolicy[]): string[] {
  return policies
    .filter((n) => n.policy !== null && n.policy !== 'noeviction')
    .map(
      (n) =>
        `Redis ${n.node} runs with maxmemory-policy ${n.policy}: when memory runs out it evicts events, offsets and leases. ` +
        'Fix: CONFIG SET maxmemory-policy noeviction',
    );
}

function validate(options: EventrailHealthOptions): GroupLimits & { timeoutMs: number; maxOutboxAgeMs?: number } {
  checkObject('health', options, 'an object of health options');
  rejectUnknownKeys('health', options, OPTION_NAMES);
  const { maxLag, maxDeadLetters, maxStallMs, maxParkedAgeMs, timeoutMs = DEFAULT_HEALTH_TIMEOUT_MS } = options;
  return {
    maxLag: optionalInteger('maxLag', maxLag, 0, Number.MAX_SAFE_INTEGER, 'an integer >= 0'),
    maxDeadLetters: optionalInteger('maxDeadLetters', maxDeadLetters, 0, Number.MAX_SAFE_INTEGER, 'an integer >= 0'),
    maxStallMs: optionalInteger('maxStallMs', maxStallMs, 1, Number.MAX_SAFE_INTEGER, 'an integer >= 1 (milliseconds)'),
    maxParkedAgeMs: optionalInteger('maxParkedAgeMs', maxParkedAgeMs, 0, Number.MAX_SAFE_INTEGER, 'an integer >= 0 (milliseconds)'),
    timeoutMs: checkInteger('timeoutMs', timeoutMs, 1, Number.MAX_SAFE_INTEGER, 'an integer >= 1'),
    maxOutboxAgeMs: optionalInteger('maxOutboxAgeMs', options.maxOutboxAgeMs, 0, Number.MAX_SAFE_INTEGER, 'an integer >= 0 (milliseconds)'),
  };
}
