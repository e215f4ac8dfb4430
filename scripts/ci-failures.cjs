#!/usr/bin/env node
// Prints the failing tests of one Jest run, from its `--json --outputFile` result, in a few lines each:
// CI's log is read from its end, where a lane's own summary may be far above (or cut off).
// Usage: node scripts/ci-failures.cjs <title> <result.json>
'use strict';
const { readFileSync } = require('node:fs');

const [title, file] = process.argv.slice(2);
const { stripVTControlCharacters: plain } = require('node:util');
let result;
try {
  result = JSON.parse(readFileSync(file, 'utf8'));
} catch (error) {
  console.log(`${title}: no Jest result to read (${error.message.split('\n')[0]}); see the run's own output`);
  process.exit(0);
}
const lines = [];
for (const suite of result.testResults ?? []) {
  const name = suite.name.replace(`${process.cwd()}/`, '');
  const failed = (suite.assertionResults ?? []).filter((test) => test.status === 'failed');
  if (failed.length === 0 && suite.status === 'failed') {
    // The suite itself failed (a syntax error, a hook that threw): its message says why.
    lines.push(
      `  ${name}: ${plain(suite.message ?? '')
        .trim()
        .split('\n')
        .slice(0, 6)
        .join('\n    ')}`,
    );
  }
  for (const test of failed) {
    const message = plain(test.failureMessages?.[0] ?? '')
      .trim()
      .split('\n')
      .slice(0, 4)
      .join('\n      ');
    lines.push(`  ${name} › ${test.fullName}\n      ${message.slice(0, 1500)}`);
  }
}
console.log(`${title}: ${result.numFailedTests} failed test(s), ${result.numFailedTestSuites} failed suite(s)`);
if (lines.length > 0) console.log(lines.join('\n'));
