import type { EventrailAdmin } from '../admin/eventrail-admin';
import { InvalidOptionError } from '../errors/invalid-option.error';
import { UnknownGroupError } from '../errors/unknown-group.error';
import type { GroupStatus } from '../admin/admin.types';
import { groupLag, isRegistered, type GroupLag } from './group-lag';

/** Every group's lag at one moment, as the scaling endpoint and the CLI print it. */
export interface LagReport {
  /** When the read finished (this process's clock), ISO 8601. */
  time: string;
  /** Keyed by group name, so a scaler reads one value with a path such as `groups.mailer.lag`. */
  groups: Record<string, GroupLag>;
}

/**
 * Reads groups' lag through `EventrailAdmin`, so it needs no worker of the
 * group: per group a fixed handful of commands, and per partition five (the
 * committed offset, its parked floor, the lease and its expiry, the O(1) lag
 * read), all sent at once; a partition whose lag position is unknown is
 * counted instead, and one that holds parked messages costs an HGETALL more.
 */
export class GroupLagReader {
  constructor(private readonly admin: EventrailAdmin) {}

  /**
   * Lag of `groups`, or of every registered group when left out. A listed
   * group that never registered (no worker ever ran) is left out rather than
   * failing the others: it appears once its first worker started. A group
   * deleted while it was read is left out too (see `isRegistered`).
   */
  async read(groups?: readonly string[]): Promise<GroupLag[]> {
    if (groups === undefined) return (await this.admin.groups()).filter(isRegistered).map(groupLag);
    const read = await Promise.all(
      groups.map((name) =>
        this.admin.group(name).then(registered, (error: unknown) => {
          if (error instanceof UnknownGroupError) return null;
          throw error;
        }),
      ),
    );
    return read.filter((status): status is GroupStatus => status !== null).map(groupLag);
  }

  /** One group's lag; `UnknownGroupError` when it never registered (or was deleted while it was read). */
  async group(name: string): Promise<GroupLag> {
    const status = await this.admin.group(name);
    if (!isRegistered(status)) throw new UnknownGroupError(name);
    return groupLag(status);
  }

  /** `read`, keyed by group name and stamped with the time. */
  async report(groups?: readonly string[]): Promise<LagReport> {
    const lags = await this.read(groups);
    return { time: new Date().toISOString(), groups: Object.fromEntries(lags.map((lag) => [lag.group, lag])) };
  }
}

function registered(status: GroupStatus): GroupStatus | null {
  return isRegistered(status) ? status : null;
}

/** Checks a list of group names given as an option (`option` names it in the error); undefined stays undefined (every group). */
export function checkGroupList(option: string, groups: unknown): readonly string[] | undefined {
  if (groups === undefined) return undefined;
  if (!Array.isArray(groups) || groups.length === 0) throw new InvalidOptionError(option, groups, 'a non-empty array of group names');
  for (const [i, group] of groups.entries()) {
    if (typeof group !== 'string' || group === '') throw new InvalidOptionError(`${option}[${i}]`, group, 'a non-empty group name');
  }
  return [...new Set(groups as string[])];
}
