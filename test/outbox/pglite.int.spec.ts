import { join } from 'node:path';
import Redis from 'ioredis';
import { spawnTypeScript } from '../support/child-processes';
import { deletePrefix, testRedisUrl, uniquePrefix } from '../support/helpers';

const CHECK = join(__dirname, '..', 'support', 'pglite-outbox-process.ts');
const FAULTS = join(__dirname, '..', 'support', 'pglite-inbox-process.ts');

/** Runs one of the PGlite checks and resolves with the result it reports (rejects with its output if it exits first). */
async function runChild(file: string, prefix: string): Promise<unknown> {
  const child = spawnTypeScript(file, { env: { PGLITE_REDIS_URL: testRedisUrl(), PGLITE_PREFIX: prefix } });
  let output = '';
  child.stdout?.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr?.on('data', (chunk: Buffer) => (output += chunk.toString()));
  try {
    return await new Promise<unknown>((resolve, reject) => {
      child.on('message', (message: { type: string; result: unknown }) => message.type === 'result' && resolve(message.result));
      child.once('exit', (code) => reject(new Error(`the PGlite check exited with ${code}:\n${output}`)));
    });
  } finally {
    const redis = new Redis(testRedisUrl());
    await deletePrefix(redis, prefix);
    redis.disconnect();
  }
}

/** pgliteConnector end to end, in child processes since PGlite does not load inside Jest's VM. */
describe('outbox on embedded PGlite', () => {
  it('stages in transactions, relays on NOTIFY, and the inbox absorbs a full replay', async () => {
    const result = await runChild(CHECK, uniquePrefix('pglite'));
    expect(result).toMatchObject({
      invoices: [1, 2, 3],
      outboxRows: 0,
      handlerCalls: 6,
      inbox: { handled: 3, skippedDuplicates: 3 },
      relay: { active: true, relayed: 3, duplicates: 0 },
    });
  }, 180_000);

  it('fails the one handle whose work caught a SQL error, and goes on past a database closed under a handle', async () => {
    const prefix = uniquePrefix('pglite-faults');
    const result = await runChild(FAULTS, prefix);
    expect(result).toEqual({
      // PGlite's COMMIT of the aborted transaction would be a ROLLBACK: the handle rejects, typed, and writes nothing.
      caught: { rejected: 'InboxTransactionAbortedError', typed: true, message: expect.stringMatching(/statement in work failed/) },
      afterCaught: { invoices: [], inbox: [] },
      retried: { resolved: { duplicate: false, result: 'done' } },
      // The close waits for the transaction in hand, which commits; handles after it fail at once.
      inFlight: { resolved: { duplicate: false, result: 'done' } },
      afterClose: { rejected: 'Error', typed: false, message: expect.stringMatching(/PGlite is clos/) },
      closedNext: { rejected: 'Error', typed: false, message: expect.stringMatching(/PGlite is clos/) },
      committed: { invoices: ['caught', 'in-flight', 'in-flight'], inbox: ['caught', 'in-flight'] },
      stats: { handled: 2, skippedDuplicates: 0 },
    });
  }, 180_000);
});
