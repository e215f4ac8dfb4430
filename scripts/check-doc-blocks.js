#!/usr/bin/env node
// Type-checks every ```ts / ```typescript block of README.md and docs/**/*.md the way a user's
// project would compile it: each block is a file of a project made like `nest new` makes one for
// Nest 12 (test/user-project/: ESM, nodenext, strict, TypeScript 6), with skipLibCheck off, this
// package installed from the tarball `npm pack` makes, and the other packages the blocks import
// installed from the registry. Other fences (```text, ```bash, ```js, ...) are left alone.
//
// Prints each failing block as <doc>:<line>: error TSxxxx ..., the line being the doc's own.
// Needs `npm run build` first. Exit code 1 when any block fails to compile.
'use strict';

const { builtinModules } = require('node:module');
const { mkdirSync, readdirSync, rmSync, writeFileSync } = require('node:fs');
const { join, relative } = require('node:path');
const { ROOT, makeProject, markdownBlocks, run } = require('./user-project');

const TEMPLATE_PACKAGES = new Set(
  Object.keys({
    ...require('../test/user-project/package.json').dependencies,
    ...require('../test/user-project/package.json').devDependencies,
  }),
);
const OWN = require('../package.json');

function markdownFiles() {
  const files = [join(ROOT, 'README.md')];
  const walk = (dir) => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const path = join(dir, entry.name);
      if (entry.isDirectory()) walk(path);
      else if (entry.name.endsWith('.md')) files.push(path);
    }
  };
  walk(join(ROOT, 'docs'));
  return files;
}

/** The package a bare import specifier names (`@scope/name/sub` -> `@scope/name`); undefined for relative and built-in ones. */
function packageOf(specifier) {
  if (specifier.startsWith('.') || specifier.startsWith('/') || specifier.startsWith('node:')) return undefined;
  const name = specifier.startsWith('@') ? specifier.split('/').slice(0, 2).join('/') : specifier.split('/')[0];
  return builtinModules.includes(name) ? undefined : name;
}

/** `name@range`, with the range this repository tests against when it has one. */
function installSpec(name) {
  const range = OWN.devDependencies?.[name] ?? OWN.peerDependencies?.[name];
  return range ? `${name}@${range}` : name;
}

function main() {
  const started = Date.now();
  const blocks = markdownFiles()
    .flatMap((file) => markdownBlocks(file))
    .filter((block) => block.lang === 'ts' || block.lang === 'typescript');
  const imported = new Set();
  for (const block of blocks) {
    for (const match of block.code.matchAll(/(?:from\s+|import\s*\(\s*|import\s+|require\s*\(\s*)['"]([^'"]+)['"]/g)) {
      const name = packageOf(match[1]);
      if (name && name !== OWN.name && !TEMPLATE_PACKAGES.has(name)) imported.add(name);
    }
  }
  // Types a block may lean on without importing them: Jest's globals are imported from @jest/globals in the docs.
  const extra = [...imported].sort().map(installSpec);
  console.log(
    `${blocks.length} TypeScript blocks in ${new Set(blocks.map((b) => b.file)).size} files; packages they import beyond the template: ${extra.join(' ') || 'none'}`,
  );

  const dir = makeProject('doc-blocks', extra);
  let failed;
  try {
    mkdirSync(join(dir, 'blocks'));
    const byFile = new Map();
    blocks.forEach((block, index) => {
      const doc = relative(ROOT, block.file);
      const name = `${String(index).padStart(3, '0')}-${doc.replace(/[^A-Za-z0-9]+/g, '-')}-L${block.line}.ts`;
      // `export {}` keeps each block a module of its own, so two blocks may declare the same names.
      writeFileSync(join(dir, 'blocks', name), `${block.code}\nexport {};\n`);
      byFile.set(name, { doc, line: block.line });
    });
    const tsconfig = require(join(dir, 'tsconfig.json'));
    tsconfig.compilerOptions = {
      ...tsconfig.compilerOptions,
      skipLibCheck: false,
      noEmit: true,
      incremental: false,
      rootDir: undefined,
      outDir: undefined,
      types: ['node'],
    };
    tsconfig.include = ['blocks/**/*.ts'];
    writeFileSync(join(dir, 'tsconfig.json'), JSON.stringify(tsconfig, null, 2));
    const result = run('npx', ['tsc', '-p', 'tsconfig.json', '--pretty', 'false'], { cwd: dir, capture: true, allowFailure: true });
    const output = `${result.stdout}${result.stderr}`;
    const failing = new Set();
    for (const line of output.split('\n')) {
      const match = /^blocks\/([^(]+)\((\d+),(\d+)\): (error .*)$/.exec(line);
      if (match && byFile.has(match[1])) {
        const { doc, line: start } = byFile.get(match[1]);
        console.log(`${doc}:${start + Number(match[2]) - 1}:${match[3]}: ${match[4]}`);
        failing.add(match[1]);
      } else if (line.trim() !== '') {
        console.log(line); // an error outside the blocks: in the package's or a dependency's types
        if (/error TS/.test(line)) failing.add(line);
      }
    }
    if (result.status !== 0 && failing.size === 0) failing.add(`tsc exited with ${result.status}`);
    failed = failing.size;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  const took = ((Date.now() - started) / 1000).toFixed(0);
  if (failed > 0) {
    console.error(`doc blocks: ${failed} of ${blocks.length} do not compile (${took} s)`);
    process.exit(1);
  }
  console.log(`doc blocks: all ${blocks.length} compile (${took} s)`);
}

main();
