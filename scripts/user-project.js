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
const { cpSync, existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } = require('node:fs');
const { createRequire } = require('node:module');
const { createServer } = require('node:net');
const { tmpdir } = require('node:os');
const { join, relative } = require('node:path');

const ROOT = join(__dirname, '..');
const TEMPLATE = join(ROOT, 'test', 'user-project');

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
  if (found.length === 0) throw new Error(`${relative(ROOT, file)}: no \`\`\`${lang} block under "${heading}"`);
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
  if (result.error) throw new Error(`${command} ${args.join(' ')}: ${result.error.message} after ${took} s`);
  if (result.status !== 0 && !options.allowFailure) {
    const output = options.capture ? `\n${result.stdout}${result.stderr}` : '';
    throw new Error(`${command} ${args.join(' ')} exited with ${result.status ?? result.signal} after ${took} s${output}`);
  }
  console.log(`  (${took} s)`);
  return result;
}

/** `npm pack` of this repository into `dir`: the tarball's path. */
function packPackage(dir) {
  if (!existsSync(join(ROOT, 'dist', 'index.js'))) throw new Error('dist/ is missing: run npm run build first');
  const result = run('npm', ['pack', '--silent', '--pack-destination', dir], { cwd: ROOT, capture: true });
  const name = result.stdout.trim().split('\n').pop();
  return join(dir, name);
}

/**
 * A fresh project from the template in a temp dir, with the tarball and the template's dependencies
 * installed from the registry, plus `extra` (`name@range` specs). Returns its directory.
 */
function makeProject(label, extra = []) {
  const dir = mkdtempSync(join(tmpdir(), `eventrail-${label}-`));
  for (const entry of readdirSync(TEMPLATE)) {
    if (entry !== 'node_modules' && entry !== 'dist') cpSync(join(TEMPLATE, entry), join(dir, entry), { recursive: true });
  }
  const tarball = packPackage(dir);
  run('npm', ['install', '--no-audit', '--no-fund', '--loglevel=error', tarball, ...extra], { cwd: dir });
  return dir;
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
    if (Date.now() > deadline) throw new Error(`gave up after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

/** README's Quick start, built and run: a POST /payments reaches the mailer group. */
async function runQuickStart(dir) {
  const quickStart = blockUnder(join(ROOT, 'README.md'), 'Quick start', 'ts', (code) => code.includes('@Module'));
  writeFileSync(join(dir, 'src', 'app.module.ts'), quickStart.code);
  run('npx', ['tsc', '-p', 'tsconfig.build.json'], { cwd: dir });

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
        if (app.exitCode !== null) throw new Error(`the Quick start app exited:\n${output}`);
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
      throw new Error(`POST /payments answered ${answer.status} ${answer.body}\n${output}`);
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
  const testing = join(ROOT, 'docs', 'guide', 'testing.md');
  writeFileSync(join(dir, 'src', 'ledger.spec.ts'), blockUnder(testing, 'vitest', 'ts').code);
  run('npx', ['vitest', 'run'], { cwd: dir, timeoutMs: 120_000 });
  rmSync(join(dir, 'src', 'ledger.spec.ts'));
}

/** docs/guide/testing.md's Jest recipe: its install line, its jest.config.js, its spec. */
function runJestRecipe(dir) {
  const testing = join(ROOT, 'docs', 'guide', 'testing.md');
  const install = blockUnder(testing, 'Jest', 'bash', (code) => /npm install/.test(code)).code.trim();
  const words = install.split(/\s+/);
  if (words[0] !== 'npm' || words[1] !== 'install' || words.some((word) => /[;&|`$<>]/.test(word))) {
    throw new Error(`unexpected install line in docs/guide/testing.md: ${install}`);
  }
  run('npm', [...words.slice(1), '--no-audit', '--no-fund', '--loglevel=error'], { cwd: dir });
  writeFileSync(join(dir, 'jest.config.js'), blockUnder(testing, 'Jest', 'js').code);
  writeFileSync(join(dir, 'src', 'ledger.spec.ts'), blockUnder(testing, 'Jest', 'ts').code);
  const pkg = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8'));
  pkg.scripts.test = 'jest';
  writeFileSync(join(dir, 'package.json'), JSON.stringify(pkg, null, 2));
  // A handle left open (a timer, a server) keeps Jest from exiting: the deadline turns that into a failure.
  run('npm', ['test'], { cwd: dir, timeoutMs: 120_000 });
}

async function main() {
  const started = Date.now();
  const dir = makeProject('user-project');
  let passed = false;
  try {
    await runQuickStart(dir);
    runVitestRecipe(dir);
    runJestRecipe(dir);
    passed = true;
  } finally {
    if (passed || process.env.KEEP_USER_PROJECT !== '1') rmSync(dir, { recursive: true, force: true });
    else console.log(`kept ${dir} (KEEP_USER_PROJECT=1)`);
  }
  console.log(`user project: Quick start, vitest and Jest recipes passed in ${((Date.now() - started) / 1000).toFixed(0)} s`);
}

module.exports = { ROOT, markdownBlocks, makeProject, run, runQuickStart, runVitestRecipe, runJestRecipe };

if (require.main === module) {
  main().catch((error) => {
    console.error(error instanceof Error ? error.message : error);
    process.exit(1);
  });
}
