import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';

const LIB = join(__dirname, '..', '..', 'lib');

/**
 * Ways of calling a script (or a lean command) around the facade
 * (lib/redis/eventrail-scripts.ts): a registered command on a client, the
 * lean sender, the script table, or an import of either file.
 */
const AROUND_THE_DOOR: Array<[string, RegExp]> = [
  [
    'a registered script command',
    /\.eventrail(?:AcquireLease|CommitOffset|MarkDelivery|MarkFailure|RenewLease|ReleaseLease|Heartbeat|DropGroup|DropGroupPartition|ResetOffset|ReanchorPosition|ReadLag|ReadBacklog|ReadBacklogBuffer|EntrySize|PublishDedup|AppendMany|AppendManyDedup|ReleaseLock|TakeLock|TrimLog|MarkArchived|PurgeStream)\s*\(/,
  ],
  ['sendLean/sendLeanScript', /\bsendLean(?:Script)?\s*[<(]/],
  ['leanScript', /\bleanScript\s*\(/],
  ['an import of redis/lean-command', /from '[./]*redis\/lean-command'/],
  ['an import of redis/scripts', /from '[./]*redis\/scripts'/],
];

function directScriptCalls(source: string): string[] {
  const found: string[] = [];
  source.split('\n').forEach((line, i) => {
    for (const [what, pattern] of AROUND_THE_DOOR) if (pattern.test(line)) found.push(`${i + 1}: ${what}: ${line.trim()}`);
  });
  return found;
}

function tsFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) return tsFiles(path);
    return path.endsWith('.ts') ? [path] : [];
  });
}

describe('the one door to the scripts', () => {
  it('finds each way around the door in a hand-made file', () => {
    const source = [
      "import { sendLeanScript } from '../../redis/lean-command';",
      "import { leanScript } from '../redis/scripts';",
      'await client.eventrailCommitOffset(lease, offset);',
      'pipeline.eventrailReleaseLock(keys.replayClaim(group, id), token);',
      "sendLean<string>(client, 'xadd', args);",
      "const script = leanScript('eventrailAppendMany');",
      'await this.redis.scripts.commitOffset({ group, partition });',
    ].join('\n');
    expect(directScriptCalls(source).map((hit) => hit.split(':')[0])).toEqual(['1', '2', '3', '4', '5', '6']);
  });

  it('is the only way lib/ outside lib/redis calls a script or a lean command', () => {
    const outside = tsFiles(LIB).filter((file) => !relative(LIB, file).startsWith(`redis/`));
    expect(outside.length).toBeGreaterThan(50);
    const hits = outside.flatMap((file) => directScriptCalls(readFileSync(file, 'utf8')).map((hit) => `lib/${relative(LIB, file)}:${hit}`));
    expect(hits).toEqual([]);
  });

  it('leaves lean-command.ts to the facade alone inside lib/redis', () => {
    const inside = tsFiles(join(LIB, 'redis')).filter((file) => !/(eventrail-scripts|lean-command|scripts)\.ts$/.test(file));
    const importers = inside.filter((file) => /from '\.\/lean-command'/.test(readFileSync(file, 'utf8')));
    expect(importers.map((file) => relative(LIB, file))).toEqual([]);
  });
});
