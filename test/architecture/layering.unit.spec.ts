import { readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve, sep } from 'node:path';
import * as ts from 'typescript';

// Reads lib/ as text: the import graph between files and folders, where files
// live, and what comments and strings say. Type-only imports count as imports:
// a folder that needs another's types is coupled to it all the same.

const LIB = resolve(__dirname, '../../lib');
const ENTRY_POINTS = ['index.ts', 'health.ts', 'prometheus.ts', 'testing.ts', 'microservices.ts', 'outbox.ts'];
const WORK_ITEM = /\bissue \d+|\(issue|\bpass \d|fifth pass/i;

function walk(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    return statSync(path).isDirectory() ? walk(path) : [path];
  });
}

const files = walk(LIB);
const sources = files.filter((f) => f.endsWith('.ts'));
const rel = (file: string): string => relative(LIB, file).split(sep).join('/');
const folderOf = (file: string): string => dirname(rel(file)).replace(/^\.$/, '(root)');
const roomOf = (file: string): string => folderOf(file).split('/')[0];

function resolveImport(from: string, spec: string): string | undefined {
  if (!spec.startsWith('.')) return undefined;
  const base = resolve(dirname(from), spec);
  return [`${base}.ts`, join(base, 'index.ts'), base].find((c) => sources.includes(c));
}

/** Every relative import of every lib/ file (static, type-only, re-exports, dynamic), resolved to a file. */
const edges: Array<[from: string, to: string]> = sources.flatMap((file) =>
  ts
    .preProcessFile(readFileSync(file, 'utf8'), true, true)
    .importedFiles.map((imported) => resolveImport(file, imported.fileName))
    .filter((to): to is string => to !== undefined)
    .map((to): [string, string] => [rel(file), rel(to)]),
);

/** Folder pairs that import each other, each with the file edges that make it. */
function mutualPairs(folder: (file: string) => string): string[] {
  const between = new Map<string, string[]>();
  for (const [from, to] of edges) {
    const [a, b] = [folder(join(LIB, from)), folder(join(LIB, to))];
    if (a === b) continue;
    const key = `${a} -> ${b}`;
    between.set(key, [...(between.get(key) ?? []), `${from} -> ${to}`]);
  }
  const pairs: string[] = [];
  for (const [key, there] of between) {
    const [a, b] = key.split(' -> ');
    const back = between.get(`${b} -> ${a}`);
    if (back && a < b) pairs.push(`${a} <-> ${b}: ${[...there, ...back].join('; ')}`);
  }
  return pairs.sort();
}

/** Strongly connected groups of more than one file (Tarjan), plus files importing themselves. */
function fileCycles(): string[] {
  const next = new Map<string, string[]>();
  for (const [from, to] of edges) next.set(from, [...(next.get(from) ?? []), to]);
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const cycles: string[] = [];
  let counter = 0;
  const visit = (v: string): void => {
    index.set(v, counter);
    low.set(v, counter++);
    stack.push(v);
    onStack.add(v);
    for (const w of next.get(v) ?? []) {
      if (!index.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (onStack.has(w)) low.set(v, Math.min(low.get(v)!, index.get(w)!));
    }
    if (low.get(v) !== index.get(v)) return;
    const group: string[] = [];
    let w: string;
    do {
      w = stack.pop()!;
      onStack.delete(w);
      group.push(w);
    } while (w !== v);
    if (group.length > 1 || (next.get(v) ?? []).includes(v)) cycles.push(`circle of ${group.length}: ${group.sort().join(', ')}`);
  };
  for (const file of sources.map(rel)) if (!index.has(file)) visit(file);
  return cycles.sort();
}

const { SyntaxKind: K } = ts;
/** Tokens after which a slash divides; anywhere else it opens a regular expression. */
const VALUE_END = new Set([K.Identifier, K.NumericLiteral, K.StringLiteral, K.CloseParenToken, K.CloseBracketToken, K.CloseBraceToken]);
const TRIVIA = new Set([K.SingleLineCommentTrivia, K.MultiLineCommentTrivia, K.NewLineTrivia, K.WhitespaceTrivia, K.ShebangTrivia]);
const PROSE = new Set([
  K.SingleLineCommentTrivia,
  K.MultiLineCommentTrivia,
  K.StringLiteral,
  K.NoSubstitutionTemplateLiteral,
  K.TemplateHead,
  K.TemplateMiddle,
  K.TemplateTail,
]);

/**
 * The comments and string literals of a script (TypeScript or JavaScript) with
 * their line numbers, read with TypeScript's scanner (a template's parts are
 * rescanned after each `${...}`); the whole text of any other file.
 */
function prose(file: string): Array<{ line: number; text: string }> {
  const text = readFileSync(file, 'utf8');
  if (!/\.[cm]?[jt]s$/.test(file)) return text.split('\n').map((line, i) => ({ line: i + 1, text: line }));
  const scanner = ts.createScanner(ts.ScriptTarget.Latest, false, ts.LanguageVariant.Standard, text);
  const found: Array<{ line: number; text: string }> = [];
  const templates: number[] = [];
  let braces = 0;
  let previous: ts.SyntaxKind = K.Unknown;
  for (let kind = scanner.scan(); kind !== K.EndOfFileToken; kind = scanner.scan()) {
    if (kind === K.OpenBraceToken) braces++;
    else if (kind === K.CloseBraceToken && templates.at(-1) === braces) kind = scanner.reScanTemplateToken(false);
    else if (kind === K.CloseBraceToken) braces--;
    else if ((kind === K.SlashToken || kind === K.SlashEqualsToken) && !VALUE_END.has(previous)) kind = scanner.reScanSlashToken();
    if (kind === K.TemplateHead) templates.push(braces);
    if (kind === K.TemplateTail) templates.pop();
    if (PROSE.has(kind)) {
      const line = text.slice(0, scanner.getTokenStart()).split('\n').length;
      found.push({
        line,
        text: kind === K.SingleLineCommentTrivia || kind === K.MultiLineCommentTrivia ? scanner.getTokenText() : scanner.getTokenValue(),
      });
    }
    if (!TRIVIA.has(kind)) previous = kind;
  }
  return found;
}

describe('lib/ layering', () => {
  it('reads the import graph (the checks below are not vacuous)', () => {
    expect(sources.length).toBeGreaterThan(100);
    expect(edges.length).toBeGreaterThan(sources.length);
  });

  it('has no two folders importing each other', () => {
    expect(mutualPairs(folderOf)).toEqual([]);
  });

  it('has no two top-level rooms importing each other', () => {
    expect(mutualPairs(roomOf)).toEqual([]);
  });

  it('has no circle of files', () => {
    expect(fileCycles()).toEqual([]);
  });

  it('keeps every file in a folder except the six entry points', () => {
    const loose = files.map(rel).filter((f) => !f.includes('/') && !ENTRY_POINTS.includes(f));
    expect(loose).toEqual([]);
  });

  it('names no work item in a comment or string', () => {
    const named = files.flatMap((file) =>
      prose(file).flatMap(({ line, text }) => (WORK_ITEM.test(text) ? [`${rel(file)}:${line}: ${text.trim()}`] : [])),
    );
    expect(named).toEqual([]);
  });
});
