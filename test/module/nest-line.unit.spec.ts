import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';

/**
 * CI runs the Nest-facing suites a second time against NestJS 11 installed side by side
 * (EVENTRAIL_NEST11_DIR, mapped in jest.config.ts). A mapping that silently fell back to the
 * project's Nest 12 would make that run prove nothing, so the run checks which Nest it loaded.
 */
const expectedMajor = process.env.EVENTRAIL_NEST11_DIR ? 11 : 12;

function loadedVersion(name: string): string {
  // require.resolve goes through Jest's resolver, moduleNameMapper included, like the suites' imports.
  const entry = require.resolve(name);
  let dir = dirname(entry);
  while (!dir.endsWith(join('node_modules', name))) dir = dirname(dir);
  return (JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as { version: string }).version;
}

describe(`the Nest the suites load (NestJS ${expectedMajor} in this run)`, () => {
  it.each(['@nestjs/common', '@nestjs/core', '@nestjs/testing'])('%s is the expected major version', (name) => {
    expect({ name, major: Number(loadedVersion(name).split('.')[0]) }).toEqual({ name, major: expectedMajor });
  });

  it('shares one rxjs with the application whichever Nest is loaded', () => {
    expect(require.resolve('rxjs')).toContain(join(process.cwd(), 'node_modules', 'rxjs'));
  });
});
