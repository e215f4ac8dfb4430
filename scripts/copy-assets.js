// Copies what tsc does not emit next to the compiled code: the Lua scripts and the dashboard's UI files.
const { cpSync, readdirSync } = require('node:fs');
const { join } = require('node:path');

const root = join(__dirname, '..');
for (const file of readdirSync(join(root, 'lib', 'scripts')).filter((name) => name.endsWith('.lua'))) {
  cpSync(join(root, 'lib', 'scripts', file), join(root, 'dist', 'scripts', file));
}
cpSync(join(root, 'lib', 'dashboard', 'ui'), join(root, 'dist', 'dashboard', 'ui'), { recursive: true });
