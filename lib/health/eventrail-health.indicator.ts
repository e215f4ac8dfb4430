import { Injectable } from '@nestjs/common';
import { HealthIndicatorResult, HealthIndicatorService } from '@nestjs/terminus';
import type { GroupStatus, NodeStatus } from '../admin/admin.types';
import { EventrailAdmin } from '../admin/eventrail-admin';
import { EventrailConsumers } from '../consumer/eventrail-consumers';
import { UnknownGroupError } from '../errors/unknown-group.error';
import { describeError } from '../util/describe-error';
import { checkInteger, optionalInteger } from '../util/option-checks';
import { withTimeout } from '../util/timeout';
import { evaluateGroup, GroupHealth, GroupLimits } from './group-health';

/** How long a health check waits for Redis by default, like Terminus's own indicators. */
export const DEFAULT_HEALTH_TIMEOUT_MS = 1000;

export interface EventrailHealthOptions {
  /**
   * Most entries a group may have after its committed offsets (summed over its
   * partitions); more and the check is `down`. Lag is a lower bound when a
   * partition holds more than `LAG_COUNT_CAP` entries on both sides of its
   * offset, so keep the limit below it.
   * @default no limit
   */
  maxLag?: number;
  /** Most dead letters a group may have; more and the check is `down`. @default no limit */
  maxDeadLetters?: number;
  /** How long Redis has to answer the whole check before it is `down`. @default 1000 */
  timeoutMs?: number;
}

const TIMED_OUT = Symbol('timed out');

/**
 * Terminus health indicator for eventrail. `up` when Redis answers within the
 * timeout and every group consumed in this process has a running worker, a
 * live lease on each of its partitions (held by any live member of the group,
 * in this process or another) and lag and dead letters within the limits.
 * Anything else is reported as `down` with details per group, never thrown,
 * so the health endpoint answers 503 with the reason.
 */
@Injectable()
export class EventrailHealthIndicator {
  constructor(
    private readonly health: HealthIndicatorService,
    private readonly consumers: EventrailConsumers,
    private readonly admin: EventrailAdmin,
  ) {}

  async isHealthy<const Key extends string = 'eventrail'>(
    key: Key = 'eventrail' as Key,
    options: EventrailHealthOptions = {},
  ): Promise<HealthIndicatorResult<Key>> {
    const { timeoutMs, ...limits } = validate(options);
    const indicator = this.health.check(key);
    // Not connected (reconnecting, closed): say so at once rather than wait out the timeout.
    const status = this.admin.connectionStatus();
    if (status !== 'ready') return indicator.down({ message: `Redis is not connected (connection ${status})` });

    const started = Date.now();
    let inspected: { groups: Record<string, GroupHealth>; nodes: NodeStatus[] } | typeof TIMED_OUT;
    try {
      inspected = await withTimeout(this.inspect(limits), timeoutMs, () => TIMED_OUT);
    } catch (error) {
      return indicator.down({ message: `Redis did not answer: ${describeError(error)}`, responseTimeMs: Date.now() - started });
    }
    if (inspected === TIMED_OUT) return indicator.down({ message: `Redis did not answer within ${timeoutMs} ms`, timeoutMs });

    const { groups, nodes } = inspected;
    const data = { responseTimeMs: Date.now() - started, workerId: this.consumers.workerId, groups, nodes };
    const problems = Object.entries(groups).flatMap(([name, group]) => group.problems.map((problem) => `${name}: ${problem}`));
    return problems.length === 0 ? indicator.up(data) : indicator.down({ message: problems.join('; '), ...data });
  }

  /**
   * PING, the status of every group of this process and which primary holds
   * which partitions, in parallel: one timeout covers them all.
   */
  private async inspect(limits: GroupLimits): Promise<{ groups: Record<string, GroupHealth>; nodes: NodeStatus[] }> {
    const names = this.consumers.groupNames().sort();
    const ownership = this.consumers.ownership();
    const running = this.consumers.isRunning;
    const workerId = this.consumers.workerId;
    const [, statuses, nodes] = await Promise.all([
      this.admin.ping(),
      Promise.all(names.map((name) => this.readGroup(name))),
      this.admin.nodes(),
    ]);
    const groups = Object.fromEntries(
      names.map((name, i) => [name, evaluateGroup(statuses[i], { running, workerId, ownedHere: ownership[name] ?? [] }, limits)]),
    );
    return { groups, nodes };
  }

  private readGroup(name: string): Promise<GroupStatus | null> {
    return this.admin.group(name).catch((error: unknown) => {
      if (error instanceof UnknownGroupError) return null;
      throw error;
    });
  }
}

function validate(options: EventrailHealthOptions): GroupLimits & { timeoutMs: number } {
  const { maxLag, maxDeadLetters, timeoutMs = DEFAULT_HEALTH_TIMEOUT_MS } = options;
  return {
    maxLag: optionalInteger('maxLag', maxLag, 0, Number.MAX_SAFE_INTEGER, 'an integer >= 0'),
    maxDeadLetters: optionalInteger('maxDeadLetters', maxDeadLetters, 0, Number.MAX_SAFE_INTEGER, 'an integer >= 0'),
    timeoutMs: checkInteger('timeoutMs', timeoutMs, 1, Number.MAX_SAFE_INTEGER, 'an integer >= 1'),
  };
}
