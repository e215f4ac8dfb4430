// Copies the Lua scripts next to their compiled loader: tsc only emits .ts files.
const { cpSync, readdirSync } = require('node:fs');
const { join } = require('node:path');

const from = join(__dirname, '..', 'lib', 'scripts');
const to = join(__dirname, '..', 'dist', 'scripts');
for (const file of readdirSync(from).filter((name) => name.endsWith('.lua'))) {
  cpSync(join(from, file), join(to, file));
}
