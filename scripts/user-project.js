#!/usr/bin/env node
// A project shaped like the one `nest new` makes for Nest 12 (ESM, nodenext, strict, TypeScript 6,
// vitest; the template is test/user-project/), with this package installed from the tarball
// `npm pack` makes and everything else from the registry: nothing from this repository's config.
//
// `node scripts/user-project.js` runs what the docs tell a user to do, with the code taken from
// the docs themselves, so a change to the docs is tested as written:
//   1. README's Quick start block as src/app.module.ts; the app is built with tsc and started
//      against a throwaway redis-server; a POST /payments must reach the mailer group;
//   2. docs/guide/testing.md's vitest spec, run with `vitest run`, unchanged config;
//   3. the same page's Jest recipe: its install line, its jest.config.js and its spec, `jest`.
// Needs `npm run build` first (the tarball packs dist/). Exit code 0 when all pass.
//
// Its helpers (blocks of a Markdown file, the tarball, the project) serve scripts/check-doc-blocks.js too.
'use strict';
/* global fetch */

const { spawn, spawnSync } = require('node:child_process');
const { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } = require('node:fs');
const { builtinModules, createRequire } = require('node:module');
const { createServer } = require('node:net');
const { tmpdir } = require('node:os');
const { join, relative, resolve } = require('node:path');
const { pathToFileURL } = require('node:url');

const ROOT = join(__dirname, '..');
const TEMPLATE = join(ROOT, 'test', 'user-project');
const TEMPLATE_PACKAGE = require('../test/user-project/package.json');
const TESTING = join(ROOT, 'docs', 'guide', 'testing.md');
const OWN = require('../package.json');

/**
 * The fenced code blocks of a Markdown file: `lang` is the first word of the info string, `line`
 * the 1-based line of the block's first code line, `heading` the nearest `#` heading above it.
 */
function markdownBlocks(file) {
  const lines = readFileSync(file, 'utf8').split('\n');
  const blocks = [];
  let open;
  let heading = '';
  lines.forEach((text, index) => {
    const fence = /^(\s*)(`{3,}|~{3,})\s*([^\s`]*)/.exec(text);
    if (open) {
      if (fence && fence[2][0] === open.fence[0] && fence[2].length >= open.fence.length && text.trim() === fence[2]) {
        blocks.push({ file, lang: open.lang, line: open.line, heading: open.heading, code: open.code.join('\n') + '\n' });
        open = undefined;
      } else {
        open.code.push(text);
      }
      return;
    }
    if (fence) {
      open = { fence: fence[2], lang: fence[3].toLowerCase(), line: index + 2, heading, code: [] };
      return;
    }
    const title = /^#{1,6}\s+(.*)$/.exec(text);
    if (title) heading = title[1].trim();
  });
  return blocks;
}

/** The one block of `lang` under the heading `heading` of `file` (the first, when `first`); fails loudly when missing. */
function blockUnder(file, heading, lang, match = () => true) {
  const found = markdownBlocks(file).filter((b) => b.heading === heading && b.lang === lang && match(b.code));
  if (found.length === 0) throw new ProjectError(`${relative(ROOT, file)}: no \`\`\`${lang} block under "${heading}"`);
  return found[0];
}

/** Runs a command to its end, output shown; throws on a non-zero exit or after `timeoutMs`. */
function run(command, args, options = {}) {
  const started = Date.now();
  console.log(`+ ${command} ${args.join(' ')}${options.cwd ? `   (in ${options.cwd})` : ''}`);
  const result = spawnSync(command, args, {
    stdio: options.capture ? ['ignore', 'pipe', 'pipe'] : 'inherit',
    encoding: 'utf8',
    timeout: options.timeoutMs ?? 600_000,
    killSignal: 'SIGKILL',
    ...options,
  });
  const took = ((Date.now() - started) / 1000).toFixed(1);
  if (result.error) throw new ProjectError(`${command} ${args.join(' ')}: ${result.error.message} after ${took} s`);
  if (result.status !== 0 && !options.allowFailure) {
    const output = options.capture ? `\n${result.stdout}${result.stderr}` : '';
    throw new ProjectError(`${command} ${args.join(' ')} exited with ${result.status ?? result.signal} after ${took} s${output}`);
  }
  console.log(`  (${took} s)`);
  return result;
}

/** Fails with `message` and nothing else: the scripts print it and exit 1. */
class ProjectError extends Error {}

function markdownFiles() {
  const files = [join(ROOT, 'README.md')];
  const walk = (dir) => {
    for (const entry of readdirSync(dir, { withFileTypes: true }).sort((a, b) => a.name.localeCompare(b.name))) {
      const path = join(dir, entry.name);
      if (entry.isDirectory()) walk(path);
      else if (entry.name.endsWith('.md')) files.push(path);
    }
  };
  walk(join(ROOT, 'docs'));
  return files;
}

/** Every ```ts / ```typescript block of README.md and docs/. */
function typeScriptBlocks() {
  return markdownFiles()
    .flatMap((file) => markdownBlocks(file))
    .filter((block) => block.lang === 'ts' || block.lang === 'typescript');
}

/** The package a bare import specifier names (`@scope/name/sub` -> `@scope/name`); undefined for relative and built-in ones. */
function packageOf(specifier) {
  if (specifier.startsWith('.') || specifier.startsWith('/') || specifier.startsWith('node:') || specifier.startsWith('<')) {
    return undefined;
  }
  const name = specifier.startsWith('@') ? specifier.split('/').slice(0, 2).join('/') : specifier.split('/')[0];
  return builtinModules.includes(name) ? undefined : name;
}

/** The name in an install spec (`@swc/jest@^0.2` -> `@swc/jest`). */
function specName(spec) {
  const at = spec.indexOf('@', 1);
  return at === -1 ? spec : spec.slice(0, at);
}

/** `name@range`, with the range this repository tests against when it has one. */
function installSpec(name) {
  const range = OWN.devDependencies?.[name] ?? OWN.peerDependencies?.[name];
  return range ? `${name}@${range}` : name;
}

/**
 * Whether the package ships its own declarations, judged from this repository's copy (the doc
 * blocks' packages are devDependencies here): a `types`/`typings` field, `types` conditions in its
 * exports, or a `.d.ts` beside its entry file. `pg` has none: its types are `@types/pg`.
 */
function shipsTypes(name) {
  let manifest;
  try {
    manifest = JSON.parse(readFileSync(join(ROOT, 'node_modules', name, 'package.json'), 'utf8'));
  } catch {
    return !OWN.devDependencies?.[typesPackage(name)]; // not installed here: typed unless we test with its @types
  }
  if (manifest.types || manifest.typings || JSON.stringify(manifest.exports ?? {}).includes('"types"')) return true;
  const entries = [manifest.main, manifest.module, 'index.js'].filter(Boolean);
  return entries.some((entry) => existsSync(join(ROOT, 'node_modules', name, entry.replace(/\.[cm]?js$/, '') + '.d.ts')));
}

/** DefinitelyTyped's name for a package's types: `pg` -> `@types/pg`, `@scope/name` -> `@types/scope__name`. */
function typesPackage(name) {
  return `@types/${name.startsWith('@') ? name.slice(1).replace('/', '__') : name}`;
}

/** The packages the doc blocks import beyond the template's, as install specs, with `@types/*` for untyped ones. */
function docBlockPackages(blocks) {
  const template = new Set(Object.keys({ ...TEMPLATE_PACKAGE.dependencies, ...TEMPLATE_PACKAGE.devDependencies }));
  const imported = new Set();
  for (const block of blocks) {
    for (const match of block.code.matchAll(/(?:from\s+|import\s*\(\s*|import\s+|require\s*\(\s*)['"]([^'"]+)['"]/g)) {
      const name = packageOf(match[1]);
      if (name && name !== OWN.name && !template.has(name)) imported.add(name);
    }
  }
  const specs = [];
  for (const name of [...imported].sort()) {
    specs.push(installSpec(name));
    if (!shipsTypes(name) && !template.has(typesPackage(name))) specs.push(installSpec(typesPackage(name)));
  }
  return specs;
}

/** docs/guide/testing.md's Jest recipe: its install line (checked to be a plain `npm install`), jest.config.js and spec. */
function jestRecipe() {
  const install = blockUnder(TESTING, 'Jest', 'bash', (code) => /npm install/.test(code)).code.trim();
  const words = install.split(/\s+/);
  if (words[0] !== 'npm' || words[1] !== 'install' || words.some((word) => /[;&|`$<>]/.test(word))) {
    throw new ProjectError(`docs/guide/testing.md: the Jest install line is not one plain npm install: ${install}`);
  }
  const packages = words.slice(2).filter((word) => !word.startsWith('-'));
  return {
    install,
    args: words.slice(1),
    packages,
    config: blockUnder(TESTING, 'Jest', 'js').code,
    spec: blockUnder(TESTING, 'Jest', 'ts').code,
  };
}

/** Everything both scripts need beyond the template, installed once: the doc blocks' packages and the Jest recipe's. */
function projectPackages() {
  const specs = [...docBlockPackages(typeScriptBlocks()), ...jestRecipe().packages];
  const byName = new Map();
  for (const spec of specs) if (!byName.has(specName(spec))) byName.set(specName(spec), spec);
  return [...byName.values()].sort();
}

/** `npm pack` of this repository into `dir`: the tarball's file name and integrity. */
function packPackage(dir) {
  if (!existsSync(join(ROOT, 'dist', 'index.js'))) throw new ProjectError('dist/ is missing: run npm run build first');
  const result = run('npm', ['pack', '--json', '--pack-destination', dir], { cwd: ROOT, capture: true });
  const [packed] = JSON.parse(result.stdout);
  return { filename: packed.filename, integrity: packed.integrity };
}

const cleanups = [];
process.on('exit', () => {
  for (const cleanup of cleanups.splice(0)) cleanup();
});
process.on('SIGINT', () => process.exit(130));
process.on('SIGTERM', () => process.exit(143));

/**
 * The user's project: the template with the tarball, the template's dependencies and
 * projectPackages() installed by one `npm install` (npm's cache reused: --prefer-offline).
 *
 * With EVENTRAIL_USER_PROJECT_DIR set (.ci/run sets it to a dir of its own run), the project lives
 * there and is reused by the next script when it holds the same tarball and packages; whoever set
 * the variable removes the dir. Otherwise it is a temp dir removed when the process exits, even on
 * failure (KEEP_USER_PROJECT=1 keeps a failed one to look at). Returns { dir, done(passed) }.
 */
function openProject(label) {
  const shared = process.env.EVENTRAIL_USER_PROJECT_DIR;
  const dir = shared ? resolve(shared) : mkdtempSync(join(tmpdir(), `eventrail-${label}-`));
  let keep = false;
  if (!shared)
    cleanups.push(() => (keep ? console.log(`kept ${dir} (KEEP_USER_PROJECT=1)`) : rmSync(dir, { recursive: true, force: true })));
  const done = (passed) => {
    keep = !passed && process.env.KEEP_USER_PROJECT === '1';
  };

  const packages = projectPackages();
  const marker = join(dir, '.eventrail-project.json');
  mkdirSync(dir, { recursive: true });
  const tarball = packPackage(dir);
  const wanted = JSON.stringify({ tarball, packages });
  if (existsSync(marker) && readFileSync(marker, 'utf8') === wanted) {
    console.log(`reusing the project in ${dir}: same tarball (${tarball.integrity.slice(0, 20)}...) and packages`);
    return { dir, done };
  }
  for (const entry of readdirSync(dir)) if (entry !== tarball.filename) rmSync(join(dir, entry), { recursive: true, force: true });
  for (const entry of readdirSync(TEMPLATE)) {
    if (entry !== 'node_modules' && entry !== 'dist') cpSync(join(TEMPLATE, entry), join(dir, entry), { recursive: true });
  }
  console.log(`packages beyond the template (the doc blocks' and the Jest recipe's): ${packages.join(' ')}`);
  const args = ['install', '--prefer-offline', '--no-audit', '--no-fund', '--loglevel=error', `./${tarball.filename}`, ...packages];
  run('npm', args, { cwd: dir });
  writeFileSync(marker, wanted);
  return { dir, done };
}

function freePort() {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

async function waitUntil(check, timeoutMs, what) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await check()) return;
    if (Date.now() > deadline) throw new ProjectError(`gave up after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

/** README's Quick start, built and run: a POST /payments reaches the mailer group. */
async function runQuickStart(dir) {
  const quickStart = blockUnder(join(ROOT, 'README.md'), 'Quick start', 'ts', (code) => code.includes('@Module'));
  writeFileSync(join(dir, 'src', 'app.module.ts'), quickStart.code);
  run(process.execPath, ['node_modules/typescript/bin/tsc', '-p', 'tsconfig.build.json', '--incremental', 'false'], { cwd: dir });

  // The installed package's own throwaway server, as a user's script would start it.
  const { startRedisServer } = createRequire(join(dir, 'package.json'))('nestjs-eventrail/testing');
  const redis = await startRedisServer();
  const port = await freePort();
  const app = spawn(process.execPath, ['dist/main.js'], {
    cwd: dir,
    env: { ...process.env, REDIS_URL: redis.url, PORT: String(port) },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  app.stdout.on('data', (chunk) => (output += chunk));
  app.stderr.on('data', (chunk) => (output += chunk));
  const exited = new Promise((resolve) => app.once('exit', (code, signal) => resolve({ code, signal })));
  try {
    let answer;
    await waitUntil(
      async () => {
        if (app.exitCode !== null) throw new ProjectError(`the Quick start app exited:\n${output}`);
        try {
          const response = await fetch(`http://127.0.0.1:${port}/payments`, {
            method: 'POST',
            headers: { 'content-type': 'application/json' },
            body: JSON.stringify({ paymentId: 'p-1', amountCents: 1250 }),
          });
          answer = { status: response.status, body: await response.text() };
          return true;
        } catch {
          return false; // not listening yet
        }
      },
      30_000,
      'the Quick start app to answer POST /payments',
    );
    if (answer.status !== 201 || JSON.parse(answer.body).ok !== true) {
      throw new ProjectError(`POST /payments answered ${answer.status} ${answer.body}\n${output}`);
    }
    await waitUntil(() => output.includes('receipt for p-1'), 30_000, `the mailer's log line for p-1; the app printed:\n${output}`);
    console.log('  Quick start: POST /payments answered {"ok":true} and the mailer group logged the receipt');
  } finally {
    app.kill('SIGTERM');
    const timer = setTimeout(() => app.kill('SIGKILL'), 10_000);
    await exited;
    clearTimeout(timer);
    await redis.stop();
  }
}

/** docs/guide/testing.md's vitest spec, with the project's vitest config as `nest new` writes it. */
function runVitestRecipe(dir) {
  writeFileSync(join(dir, 'src', 'ledger.spec.ts'), blockUnder(TESTING, 'vitest', 'ts').code);
  try {
    run(process.execPath, ['node_modules/vitest/vitest.mjs', 'run'], { cwd: dir, timeoutMs: 120_000 });
  } finally {
    rmSync(join(dir, 'src', 'ledger.spec.ts'), { force: true });
  }
}

/**
 * The packages jest.config.js makes Jest load (its transforms, preset, environment, setup files,
 * reporters...) and their required peers: each must be in the docs' install line, or be Jest itself.
 */
async function jestConfigPackages(dir) {
  const config = (await import(pathToFileURL(join(dir, 'jest.config.js')).href)).default;
  const referenced = new Set(['jest']); // "test": "jest"
  const add = (value) => {
    const name = typeof value === 'string' ? packageOf(value) : undefined;
    if (name) referenced.add(name);
  };
  for (const value of Object.values(config.transform ?? {})) add(Array.isArray(value) ? value[0] : value);
  for (const key of ['preset', 'runner', 'testRunner', 'globalSetup', 'globalTeardown', 'snapshotResolver']) add(config[key]);
  if (config.testEnvironment && !['node', 'jest-environment-node'].includes(config.testEnvironment)) {
    add(config.testEnvironment.startsWith('jest-environment-') ? config.testEnvironment : `jest-environment-${config.testEnvironment}`);
  }
  for (const key of ['setupFiles', 'setupFilesAfterEnv', 'snapshotSerializers', 'reporters']) {
    for (const value of config[key] ?? []) add(Array.isArray(value) ? value[0] : value === 'default' ? undefined : value);
  }
  const needed = new Set(referenced);
  for (const name of referenced) {
    const manifestPath = join(dir, 'node_modules', name, 'package.json');
    if (!existsSync(manifestPath)) continue;
    const manifest = JSON.parse(readFileSync(manifestPath, 'utf8'));
    for (const peer of Object.keys(manifest.peerDependencies ?? {})) {
      if (!manifest.peerDependenciesMeta?.[peer]?.optional) needed.add(peer);
    }
  }
  return [...needed].sort();
}

/**
 * docs/guide/testing.md's Jest recipe: its install line, its jest.config.js, its spec, `npm test`.
 * The line's packages are installed with the project; the line runs only when one is missing, but
 * what the config needs is checked against the line either way.
 */
async function runJestRecipe(dir) {
  const recipe = jestRecipe();
  writeFileSync(join(dir, 'jest.config.js'), recipe.config);
  const present = (name) => existsSync(join(dir, 'node_modules', name, 'package.json'));
  if (recipe.packages.every((spec) => present(specName(spec)))) {
    console.log(`  the install line's packages are installed with the project: ${recipe.install}`);
  } else {
    run('npm', [...recipe.args, '--prefer-offline', '--no-audit', '--no-fund', '--loglevel=error'], { cwd: dir });
  }
  const inLine = new Set(recipe.packages.map(specName));
  const project = JSON.parse(readFileSync(join(TEMPLATE, 'package.json'), 'utf8'));
  const scaffolded = new Set(Object.keys({ ...project.dependencies, ...project.devDependencies }));
  const missing = (await jestConfigPackages(dir)).filter((name) => !inLine.has(name) && !scaffolded.has(name));
  if (missing.length > 0) {
    throw new ProjectError(
      `docs/guide/testing.md: jest.config.js needs ${missing.join(', ')}, which the install line does not install: ${recipe.install}`,
    );
  }
  writeFileSync(join(dir, 'src', 'ledger.spec.ts'), recipe.spec);
  const pkg = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8'));
  pkg.scripts.test = 'jest';
  writeFileSync(join(dir, 'package.json'), JSON.stringify(pkg, null, 2));
  // A handle left open (a timer, a server) keeps Jest from exiting: the deadline turns that into a failure.
  run('npm', ['test'], { cwd: dir, timeoutMs: 120_000 });
}

async function main() {
  const started = Date.now();
  const times = [];
  const step = async (name, fn) => {
    const at = Date.now();
    await fn();
    times.push(`${name} ${((Date.now() - at) / 1000).toFixed(1)} s`);
  };
  let project;
  await step('project', () => (project = openProject('user-project')));
  let passed = false;
  try {
    await step('Quick start', () => runQuickStart(project.dir));
    await step('vitest recipe', () => runVitestRecipe(project.dir));
    await step('Jest recipe', () => runJestRecipe(project.dir));
    passed = true;
  } finally {
    project.done(passed);
  }
  const took = ((Date.now() - started) / 1000).toFixed(0);
  console.log(`user project: Quick start, vitest and Jest recipes passed in ${took} s (${times.join(', ')})`);
}

/** Runs `main`, turning a failure into one clear message and exit code 1 (temp dirs go on exit). */
function runMain(what, mainFn) {
  mainFn().catch((error) => {
    console.error(`\n${what} FAILED: ${error instanceof Error ? error.message : error}`);
    if (error instanceof Error && !(error instanceof ProjectError) && error.stack) console.error(error.stack);
    process.exit(1);
  });
}

module.exports = {
  ROOT,
  ProjectError,
  markdownBlocks,
  typeScriptBlocks,
  openProject,
  jestConfigPackages,
  run,
  runMain,
};

if (require.main === module) runMain('user project', main);
