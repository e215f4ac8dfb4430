import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { CLOUD_EVENTS_SOURCE_OPTION_NAMES } from '../../lib/cloudevents/cloud-events-source.options';
import { KNOWN as INGRESS_OPTION_NAMES } from '../../lib/cloudevents/cloud-events-ingress.options';
import { BATCH_OPTION_NAMES, CONSUMER_OPTION_NAMES, REDELIVERY_OPTION_NAMES } from '../../lib/consumer/consumer.options';
import { KNOWN as DASHBOARD_OPTION_NAMES } from '../../lib/dashboard/dashboard.options';
import { OPTION_NAMES as HEALTH_OPTION_NAMES } from '../../lib/health/eventrail-health.indicator';
import { CLIENT_OPTION_NAMES, SERVER_OPTION_NAMES } from '../../lib/microservices/transport.options';
import { LAG_METRICS_OPTION_NAMES } from '../../lib/metrics/lag-metrics.options';
import { MODULE_OPTION_NAMES } from '../../lib/module/eventrail.options';
import { INBOX_OPTION_NAMES, OPTION_NAMES as OUTBOX_OPTION_NAMES, RELAY_OPTION_NAMES } from '../../lib/outbox/outbox.options';
import { CLUSTER_OPTION_NAMES, REDIS_OPTION_NAMES, REPLICATION_OPTION_NAMES } from '../../lib/redis/connection.options';
import { FS_ARCHIVE_OPTION_NAMES, RETENTION_OPTION_NAMES, S3_ARCHIVE_OPTION_NAMES } from '../../lib/retention/retention.options';
import { TRACING_OPTION_NAMES } from '../../lib/tracing/tracing.options';

const OPTIONS_PAGE = join(__dirname, '../../docs/reference/options.md');

/** Each part of the options reference, and the list the code checks that part's keys against. */
const PARTS: Record<string, readonly string[]> = {
  module: MODULE_OPTION_NAMES,
  consumer: CONSUMER_OPTION_NAMES,
  redelivery: REDELIVERY_OPTION_NAMES,
  batch: BATCH_OPTION_NAMES,
  'redis-cluster': CLUSTER_OPTION_NAMES,
  // Every other key of `redis.sentinel` is an ioredis option, refused when not in ioredis's list.
  'redis-sentinel': REDIS_OPTION_NAMES,
  replication: REPLICATION_OPTION_NAMES,
  retention: RETENTION_OPTION_NAMES,
  'retention-archive-fs': FS_ARCHIVE_OPTION_NAMES,
  'retention-archive-s3': S3_ARCHIVE_OPTION_NAMES,
  tracing: TRACING_OPTION_NAMES,
  cloudevents: CLOUD_EVENTS_SOURCE_OPTION_NAMES,
  health: HEALTH_OPTION_NAMES,
  dashboard: DASHBOARD_OPTION_NAMES,
  'lag-metrics': LAG_METRICS_OPTION_NAMES,
  'cloudevents-ingress': INGRESS_OPTION_NAMES,
  outbox: OUTBOX_OPTION_NAMES,
  'outbox-relay': RELAY_OPTION_NAMES,
  inbox: INBOX_OPTION_NAMES,
  'microservices-server': SERVER_OPTION_NAMES,
  'microservices-client': CLIENT_OPTION_NAMES,
};

const MARKER = /^<!-- options: ([a-z0-9-]+) -->$/;
const NAME_CELL = /^`([A-Za-z0-9_]+)`$/;

interface Table {
  part: string;
  line: number;
  names: string[];
}

/** The option tables of the page: each a `<!-- options: <part> -->` line, then a table whose first column names the option. */
function readTables(text: string): { tables: Table[]; unmarked: number[] } {
  const lines = text.split('\n');
  const tables: Table[] = [];
  const unmarked: number[] = [];
  for (let i = 0; i < lines.length; i++) {
    const marker = MARKER.exec(lines[i].trim());
    const startsTable = lines[i].startsWith('|') && !lines[i - 1]?.startsWith('|');
    if (startsTable && !MARKER.test(lines[i - 1]?.trim() ?? '')) unmarked.push(i + 1);
    if (!marker) continue;
    const names: string[] = [];
    // Header and separator, then one row per option.
    for (let row = i + 3; row < lines.length && lines[row].startsWith('|'); row++) {
      const cell = lines[row].split('|')[1].trim();
      const name = NAME_CELL.exec(cell)?.[1];
      if (name === undefined) throw new Error(`options.md line ${row + 1}: the first cell (${cell}) is not an option name in backticks`);
      names.push(name);
    }
    if (!lines[i + 1]?.startsWith('|'))
      throw new Error(`options.md line ${i + 1}: the marker of "${marker[1]}" is not directly followed by a table`);
    tables.push({ part: marker[1], line: i + 1, names });
  }
  return { tables, unmarked };
}

function read(): { tables: Table[]; unmarked: number[] } {
  let text: string;
  try {
    text = readFileSync(OPTIONS_PAGE, 'utf8');
  } catch {
    throw new Error(`docs/reference/options.md is missing: it must hold one table per part (${Object.keys(PARTS).join(', ')})`);
  }
  return readTables(text);
}

describe('the options reference (docs/reference/options.md)', () => {
  it.each(Object.entries(PARTS))('"%s": its table names exactly the options the code accepts', (part, known) => {
    const table = read().tables.filter((t) => t.part === part);
    if (table.length === 0)
      throw new Error(`docs/reference/options.md has no table for "${part}" (a line <!-- options: ${part} --> before it)`);
    expect(table).toHaveLength(1);
    const { names } = table[0];
    expect({ part, duplicates: names.filter((name, i) => names.indexOf(name) !== i) }).toEqual({ part, duplicates: [] });
    expect({ part, documented: [...names].sort() }).toEqual({ part, documented: [...known].sort() });
  });

  it('marks every option table with its part, and names no part the code does not have', () => {
    const { tables, unmarked } = read();
    expect({ unknownParts: tables.map((t) => t.part).filter((part) => !(part in PARTS)) }).toEqual({ unknownParts: [] });
    expect({ tablesWithoutMarker: unmarked.map((line) => `line ${line}`) }).toEqual({ tablesWithoutMarker: [] });
  });

  it('reads the tables as written, and would catch a drift', () => {
    const page = [
      '<!-- options: tracing -->',
      '| option | type |',
      '|---|---|',
      '| `enabled` | boolean |',
      '| `parnet` | boolean |',
      '',
      'text',
    ];
    expect(readTables(page.join('\n')).tables).toEqual([{ part: 'tracing', line: 1, names: ['enabled', 'parnet'] }]);
    expect(readTables(['| a |', '|---|'].join('\n')).unmarked).toEqual([1]);
    expect(() => readTables(['<!-- options: tracing -->', '| option |', '|---|', '| enabled |'].join('\n'))).toThrow(
      'not an option name in backticks',
    );
  });
});
