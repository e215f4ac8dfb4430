import type { Command } from 'commander';
import type { NodeStatus, PartitionLogStats } from '../../admin/admin.types';
import type { CliRunner } from '../runtime/cli.runner';
import { examples } from '../runtime/help.text';
import { formatFields, formatTable } from '../runtime/table.formatter';
import { formatBytes, formatDate, formatPartitions, NONE } from '../runtime/value.format';
import { isLagCapped } from './group.view';

interface GroupSummary {
  name: string;
  members: number;
  lag: number;
  lagCapped: boolean;
  deadLetters: number;
  lastSeen: Date | null;
}

/** What `status --json` prints. */
interface StatusReport {
  /** The URL, or the seed URLs of a cluster, with passwords redacted. */
  redis: string;
  cluster: boolean;
  prefix: string;
  connection: string;
  pingMs: number;
  usedMemoryBytes: number | null;
  nodes: NodeStatus[];
  partitions: PartitionLogStats[];
  groups: GroupSummary[];
}

export function registerStatusCommand(program: Command, runner: CliRunner): void {
  program
    .command('status')
    .description('connection, ping, nodes, partition lengths, memory, and a summary of every consumer group')
    .addHelpText(
      'after',
      examples([
        'eventrail status',
        'eventrail status --json',
        'eventrail --prefix orders --redis-url redis://redis:6379 status',
        'eventrail --cluster --redis-url redis://10.0.0.1:7000,redis://10.0.0.2:7000 status',
      ]) + '\nOn Redis Cluster, the nodes table lists each primary, its replicas and the partitions whose slots it serves.\n',
    )
    .action(
      runner.action(async (ctx) => {
        const session = await ctx.open();
        const { admin } = session;
        const overview = await admin.overview();
        const report: StatusReport = {
          redis: session.redis,
          cluster: session.cluster,
          prefix: overview.prefix,
          connection: overview.redis.status,
          pingMs: Math.round(overview.redis.pingMs * 100) / 100,
          usedMemoryBytes: overview.redis.usedMemoryBytes,
          nodes: overview.nodes,
          partitions: overview.log.partitions,
          groups: overview.groups.map((g) => ({
            name: g.name,
            members: g.members.length,
            lag: g.lag,
            lagCapped: isLagCapped(g),
            deadLetters: g.deadLetters,
            lastSeen: g.lastSeen,
          })),
        };
        ctx.output.result(report, () => renderStatus(report, overview.log.length));
      }),
    );
}

/** `entries`: the log's length, summed over partitions. */
function renderStatus(report: StatusReport, entries: number): string {
  const sections = [
    formatFields([
      ['Redis', `${report.redis} (${report.cluster ? 'cluster, ' : ''}${report.connection}, ping ${report.pingMs} ms)`],
      ['Prefix', report.prefix],
      ['Partitions', report.partitions.length],
      ['Entries', entries],
      ['Memory', formatBytes(report.usedMemoryBytes)],
    ]),
    formatTable(report.nodes, [
      { header: 'node', value: (n) => n.node },
      { header: 'replicas', value: (n) => n.replicas.join(',') || NONE },
      { header: 'partitions', value: (n) => formatPartitions(n.partitions) },
    ]),
    formatTable(report.partitions, [
      { header: 'partition', value: (p) => p.partition, align: 'right' },
      { header: 'length', value: (p) => p.length, align: 'right' },
      { header: 'first id', value: (p) => p.firstId ?? NONE },
      { header: 'last id', value: (p) => p.lastId ?? NONE },
    ]),
    report.groups.length === 0
      ? 'No consumer groups.'
      : formatTable(report.groups, [
          { header: 'group', value: (g) => g.name },
          { header: 'members', value: (g) => g.members, align: 'right' },
          { header: 'lag', value: (g) => (g.lagCapped ? `${g.lag}+` : g.lag), align: 'right' },
          { header: 'dead letters', value: (g) => g.deadLetters, align: 'right' },
          { header: 'last seen', value: (g) => formatDate(g.lastSeen) },
        ]),
  ];
  return sections.join('\n\n');
}
