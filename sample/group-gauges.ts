import { Injectable } from '@nestjs/common';
import { Gauge, Registry } from 'prom-client';
import { EventrailAdmin, GroupStatus } from 'nestjs-eventrail';

/**
 * Fleet-wide gauges per group, read from Redis through the admin service at
 * each scrape: live members, dead letters waiting, lag. The hooks of
 * `createPrometheusMetrics` only see what this process does; these see the
 * group as a whole, so "no live member at all" can be alerted on.
 */
@Injectable()
export class GroupGauges {
  private snapshot?: Promise<GroupStatus[]>;

  constructor(
    private readonly admin: EventrailAdmin,
    registry: Registry,
  ) {
    const gauge = (name: string, help: string, value: (group: GroupStatus) => number): void => {
      const read = (): Promise<GroupStatus[]> => this.groups();
      new Gauge({
        name,
        help,
        labelNames: ['group'],
        registers: [registry],
        async collect() {
          this.reset(); // a pruned group disappears
          for (const group of await read()) this.set({ group: group.name }, value(group));
        },
      });
    };
    gauge('eventrail_group_members', 'Live workers of the group, from Redis', (g) => g.members.length);
    gauge('eventrail_group_dead_letters', 'Dead letters waiting in the group, from Redis', (g) => g.deadLetters);
    gauge('eventrail_group_lag', 'Entries after the committed offsets, all partitions (counted up to 10000 each)', (g) => g.lag);
  }

  /** One `admin.groups()` per scrape, shared by the three gauges. */
  private groups(): Promise<GroupStatus[]> {
    this.snapshot ??= this.admin.groups().finally(() => setTimeout(() => (this.snapshot = undefined), 1000).unref());
    return this.snapshot;
  }
}
