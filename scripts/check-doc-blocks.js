#!/usr/bin/env node
// Type-checks every ```ts / ```typescript block of README.md and docs/**/*.md the way a user's
// project would compile it: each block is a file of a project made like `nest new` makes one for
// Nest 12 (test/user-project/: ESM, nodenext, strict, TypeScript 6), with skipLibCheck off, this
// package installed from the tarball `npm pack` makes, and the other packages the blocks import
// installed from the registry (with their @types when they ship no types). Other fences (```text,
// ```bash, ```js, ...) are left alone. The project is scripts/user-project.js's, shared with it
// when EVENTRAIL_USER_PROJECT_DIR names one dir for both (.ci/run does).
//
// Fails (exit 1) on any error in a block, in this package's own declarations
// (node_modules/nestjs-eventrail/**) or in the compiler's setup, printed as <doc>:<line>:<col> for
// the blocks. Errors inside another package's own declarations (drizzle-orm's under TypeScript 6,
// say) are not ours to fix: they are counted per package as a warning (VERBOSE=1 prints them).
// Needs `npm run build` first.
'use strict';

const { mkdirSync, rmSync, writeFileSync } = require('node:fs');
const { join, relative } = require('node:path');
const { ROOT, ProjectError, openProject, run, runMain, typeScriptBlocks } = require('./user-project');

const OWN_NAME = require('../package.json').name;
const BLOCKS_DIR = 'doc-blocks';
const TSCONFIG = 'tsconfig.doc-blocks.json';

/** tsc's `--pretty false` output as diagnostics: { file, line, column, code, text }, continuation lines joined. */
function diagnostics(output) {
  const found = [];
  for (const line of output.split('\n')) {
    const located = /^(.+?)\((\d+),(\d+)\): error (TS\d+): (.*)$/.exec(line);
    const global = /^error (TS\d+): (.*)$/.exec(line);
    if (located) {
      const [, file, row, column, code, text] = located;
      found.push({ file, line: Number(row), column: Number(column), code, text });
    } else if (global) {
      found.push({ file: undefined, code: global[1], text: global[2] });
    } else if (line.trim() !== '' && found.length > 0 && /^\s/.test(line)) {
      found[found.length - 1].text += `\n${line}`;
    } else if (line.trim() !== '') {
      found.push({ file: undefined, code: 'output', text: line }); // anything tsc says that is not a diagnostic
    }
  }
  return found;
}

/** The package owning a path under node_modules (the innermost one), else undefined. */
function packageOfPath(file) {
  const parts = file.split('/');
  const at = parts.lastIndexOf('node_modules');
  if (at === -1) return undefined;
  return parts[at + 1]?.startsWith('@') ? `${parts[at + 1]}/${parts[at + 2]}` : parts[at + 1];
}

async function main() {
  const started = Date.now();
  const blocks = typeScriptBlocks();
  console.log(`${blocks.length} TypeScript blocks in ${new Set(blocks.map((b) => b.file)).size} files`);

  const project = openProject('doc-blocks');
  const installed = Date.now();
  const { dir } = project;
  let passed = false;
  try {
    rmSync(join(dir, BLOCKS_DIR), { recursive: true, force: true });
    mkdirSync(join(dir, BLOCKS_DIR));
    const byFile = new Map();
    blocks.forEach((block, index) => {
      const doc = relative(ROOT, block.file);
      const name = `${BLOCKS_DIR}/${String(index).padStart(3, '0')}-${doc.replace(/[^A-Za-z0-9]+/g, '-')}-L${block.line}.ts`;
      // `export {}` keeps each block a module of its own, so two blocks may declare the same names.
      writeFileSync(join(dir, name), `${block.code}\nexport {};\n`);
      byFile.set(name, { doc, line: block.line });
    });
    // The project's own tsconfig.json (as nest new writes it), with the libraries' declarations checked.
    const tsconfig = {
      extends: './tsconfig.json',
      compilerOptions: { skipLibCheck: false, noEmit: true, incremental: false, declaration: false, sourceMap: false },
      include: [`${BLOCKS_DIR}/**/*.ts`],
    };
    writeFileSync(join(dir, TSCONFIG), JSON.stringify(tsconfig, null, 2));
    const result = run(process.execPath, ['node_modules/typescript/bin/tsc', '-p', TSCONFIG, '--pretty', 'false'], {
      cwd: dir,
      capture: true,
      allowFailure: true,
    });
    const checked = Date.now();

    const ours = [];
    const theirs = new Map(); // package -> diagnostics
    for (const diagnostic of diagnostics(`${result.stdout}${result.stderr}`)) {
      const owner = diagnostic.file && packageOfPath(diagnostic.file);
      if (owner && owner !== OWN_NAME) {
        theirs.set(owner, [...(theirs.get(owner) ?? []), diagnostic]);
      } else {
        ours.push(diagnostic);
      }
    }
    if (result.status !== 0 && ours.length === 0 && theirs.size === 0) {
      ours.push({ code: 'exit', text: `tsc exited with ${result.status ?? result.signal} and said nothing` });
    }

    for (const [owner, found] of [...theirs].sort()) {
      const codes = new Map();
      for (const d of found) codes.set(d.code, (codes.get(d.code) ?? 0) + 1);
      const files = new Set(found.map((d) => d.file)).size;
      const summary = [...codes].map(([code, count]) => `${code} x${count}`).join(', ');
      console.log(
        `warning: ${found.length} errors inside ${owner}'s own declarations (${files} files; ${summary}): not in the docs, not failing`,
      );
      if (process.env.VERBOSE === '1') for (const d of found) console.log(`  ${d.file}(${d.line},${d.column}): ${d.code}: ${d.text}`);
    }

    const failingBlocks = new Set();
    for (const d of ours) {
      const block = d.file && byFile.get(d.file);
      if (block) {
        failingBlocks.add(`${block.doc}:${block.line}`);
        console.log(`${block.doc}:${block.line + d.line - 1}:${d.column}: error ${d.code}: ${d.text}`);
      } else if (d.file) {
        console.log(`${d.file}(${d.line},${d.column}): error ${d.code}: ${d.text}`);
      } else {
        console.log(`error ${d.code}: ${d.text}`);
      }
    }
    const timing = `project ${((installed - started) / 1000).toFixed(1)} s, tsc ${((checked - installed) / 1000).toFixed(1)} s`;
    if (ours.length > 0) {
      const elsewhere = ours.filter((d) => !(d.file && byFile.has(d.file))).length;
      throw new ProjectError(
        `${ours.length} errors: ${failingBlocks.size} of ${blocks.length} blocks do not compile` +
          `${failingBlocks.size ? ` (${[...failingBlocks].join(', ')})` : ''}` +
          `${elsewhere ? `; ${elsewhere} outside the blocks (in ${OWN_NAME}'s declarations or the setup)` : ''} [${timing}]`,
      );
    }
    passed = true;
    console.log(`doc blocks: all ${blocks.length} compile [${timing}]`);
  } finally {
    rmSync(join(dir, BLOCKS_DIR), { recursive: true, force: true });
    rmSync(join(dir, TSCONFIG), { force: true });
    project.done(passed);
  }
}

runMain('doc blocks', main);
