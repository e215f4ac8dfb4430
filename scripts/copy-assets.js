// Copies what tsc does not emit next to the compiled code: the Lua scripts and the dashboard's UI files.
const { chmodSync, cpSync, readdirSync } = require('node:fs');
const { join } = require('node:path');

const root = join(__dirname, '..');
for (const file of readdirSync(join(root, 'lib', 'redis', 'scripts')).filter((name) => name.endsWith('.lua'))) {
  cpSync(join(root, 'lib', 'redis', 'scripts', file), join(root, 'dist', 'redis', 'scripts', file));
}
cpSync(join(root, 'lib', 'dashboard', 'ui'), join(root, 'dist', 'dashboard', 'ui'), { recursive: true });
// npm marks the bin executable when the package is installed; this does it for a checkout too.
chmodSync(join(root, 'dist', 'cli', 'main.js'), 0o755);
