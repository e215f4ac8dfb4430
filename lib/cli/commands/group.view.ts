import type { GroupStatus } from '../../admin/admin.types';
import { formatFields, formatTable } from '../runtime/table.formatter';
import { formatDate, formatLag, formatPartitions, NONE } from '../runtime/value.format';

/** Human renderings of `GroupStatus`, shared by `status`, `groups` and `group`. */

export function isLagCapped(group: GroupStatus): boolean {
  return group.partitions.some((p) => p.lagCapped);
}

export function renderGroups(groups: readonly GroupStatus[]): string {
  if (groups.length === 0) return 'No consumer groups.';
  return formatTable(groups, [
    { header: 'group', value: (g) => g.name },
    { header: 'members', value: (g) => g.members.length, align: 'right' },
    { header: 'lag', value: (g) => formatLag(g.lag, isLagCapped(g)), align: 'right' },
    { header: 'dead letters', value: (g) => g.deadLetters, align: 'right' },
    { header: 'last seen', value: (g) => formatDate(g.lastSeen) },
    { header: 'events', value: (g) => g.events.join(',') || NONE },
  ]);
}

export function renderGroup(group: GroupStatus): string {
  const owners = new Map<string, number[]>();
  for (const p of group.partitions) if (p.leaseOwner) owners.set(p.leaseOwner, [...(owners.get(p.leaseOwner) ?? []), p.partition]);
  const sections = [
    formatFields([
      ['Group', group.name],
      ['Events', group.events.join(', ') || NONE],
      ['Members', group.members.length],
      ['Lag', formatLag(group.lag, isLagCapped(group))],
      ['Dead letters', group.deadLetters],
      ['Last seen', formatDate(group.lastSeen)],
    ]),
    group.members.length === 0
      ? 'No live members.'
      : formatTable(group.members, [
          { header: 'member', value: (m) => m.workerId },
          { header: 'host', value: (m) => m.host ?? NONE },
          { header: 'pid', value: (m) => m.pid ?? NONE, align: 'right' },
          { header: 'partitions', value: (m) => formatPartitions(owners.get(m.workerId) ?? []) },
          { header: 'started', value: (m) => formatDate(m.startedAt) },
          { header: 'last heartbeat', value: (m) => formatDate(m.lastHeartbeat) },
        ]),
    formatTable(group.partitions, [
      { header: 'partition', value: (p) => p.partition, align: 'right' },
      { header: 'committed', value: (p) => p.committed ?? NONE },
      { header: 'lag', value: (p) => formatLag(p.lag, p.lagCapped), align: 'right' },
      { header: 'lease owner', value: (p) => p.leaseOwner ?? NONE },
      { header: 'lease expires in', value: (p) => (p.leaseExpiresInMs === null ? NONE : `${p.leaseExpiresInMs} ms`), align: 'right' },
    ]),
  ];
  return sections.join('\n\n');
}
