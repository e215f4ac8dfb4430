import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import ts from 'typescript';

/**
 * Every name an entry point exports is in the docs: its row in
 * docs/reference/import-paths.md, under that entry point's heading, and each
 * exported error in docs/reference/errors.md with its import path. Read from
 * the compiler's view of the entry points, so a new export without its row
 * fails here.
 */
const ROOT = join(__dirname, '..', '..');
const ENTRY_POINTS: Record<string, string> = {
  'nestjs-eventrail': 'lib/index.ts',
  'nestjs-eventrail/health': 'lib/health.ts',
  'nestjs-eventrail/prometheus': 'lib/prometheus.ts',
  'nestjs-eventrail/testing': 'lib/testing.ts',
  'nestjs-eventrail/microservices': 'lib/microservices.ts',
  'nestjs-eventrail/outbox': 'lib/outbox.ts',
};

function exportedNames(): Map<string, string[]> {
  const files = Object.values(ENTRY_POINTS).map((file) => join(ROOT, file));
  const program = ts.createProgram(files, {
    target: ts.ScriptTarget.ES2022,
    module: ts.ModuleKind.Node16,
    experimentalDecorators: true,
    noEmit: true,
  });
  const checker = program.getTypeChecker();
  const names = new Map<string, string[]>();
  for (const [path, file] of Object.entries(ENTRY_POINTS)) {
    const source = program.getSourceFile(join(ROOT, file));
    const symbol = source && checker.getSymbolAtLocation(source);
    if (!symbol) throw new Error(`cannot read the exports of ${file}`);
    names.set(
      path,
      checker.getExportsOfModule(symbol).map((exported) => exported.name),
    );
  }
  return names;
}

/** The rows of import-paths.md per entry point: the `## \`<path>\`` heading, then its table's first column. */
function documentedPaths(): Map<string, Set<string>> {
  const byPath = new Map<string, Set<string>>();
  let current: Set<string> | undefined;
  for (const line of readFileSync(join(ROOT, 'docs/reference/import-paths.md'), 'utf8').split('\n')) {
    const heading = /^## `([^`]+)`/.exec(line);
    if (heading) byPath.set(heading[1], (current = new Set()));
    const row = /^\| `([^`]+)` \|/.exec(line);
    if (row && current) current.add(row[1]);
  }
  return byPath;
}

describe('the docs name every export', () => {
  const exported = exportedNames();

  it('reads the entry points (a check that an empty list cannot pass)', () => {
    expect(exported.get('nestjs-eventrail')).toContain('EventrailModule');
    expect(exported.get('nestjs-eventrail/outbox')).toContain('EventrailOutbox');
  });

  it.each(Object.keys(ENTRY_POINTS))('import-paths.md lists exactly what %s exports', (path) => {
    const documented = documentedPaths().get(path);
    expect({ path, heading: documented !== undefined }).toEqual({ path, heading: true });
    const names = exported.get(path) ?? [];
    expect({ path, missing: names.filter((name) => !documented?.has(name)).sort() }).toEqual({ path, missing: [] });
    expect({ path, notExported: [...(documented ?? [])].filter((name) => !names.includes(name)).sort() }).toEqual({
      path,
      notExported: [],
    });
  });

  it('errors.md gives every exported error with an import path it is exported from', () => {
    const errors = readFileSync(join(ROOT, 'docs/reference/errors.md'), 'utf8');
    const wrong: string[] = [];
    for (const [path, names] of exported) {
      for (const name of names.filter((exportedName) => /Error$/.test(exportedName))) {
        const row = errors.split('\n').find((line) => line.startsWith(`| \`${name}\` |`));
        if (!row) wrong.push(`${name}: no row`);
        else if (
          !row.includes(`from '${path}'`) &&
          !Object.keys(ENTRY_POINTS).some((other) => row.includes(`from '${other}'`) && exported.get(other)?.includes(name))
        )
          wrong.push(`${name}: the row's import path does not export it`);
      }
    }
    expect(wrong).toEqual([]);
  });
});
