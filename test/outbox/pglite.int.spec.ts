import { join } from 'node:path';
import Redis from 'ioredis';
import { spawnTypeScript } from '../support/child-processes';
import { deletePrefix, testRedisUrl, uniquePrefix } from '../support/helpers';

const CHECK = join(__dirname, '..', 'support', 'pglite-outbox-process.ts');

/** pgliteConnector end to end, in a child process since PGlite does not load inside Jest's VM. */
describe('outbox on embedded PGlite', () => {
  it('stages in transactions, relays on NOTIFY, and the inbox absorbs a full replay', async () => {
    const prefix = uniquePrefix('pglite');
    const child = spawnTypeScript(CHECK, { env: { PGLITE_REDIS_URL: testRedisUrl(), PGLITE_PREFIX: prefix } });
    let output = '';
    child.stdout?.on('data', (chunk: Buffer) => (output += chunk.toString()));
    child.stderr?.on('data', (chunk: Buffer) => (output += chunk.toString()));
    const result = await new Promise<unknown>((resolve, reject) => {
      child.on('message', (message: { type: string; result: unknown }) => message.type === 'result' && resolve(message.result));
      child.once('exit', (code) => reject(new Error(`the PGlite check exited with ${code}:\n${output}`)));
    });
    const redis = new Redis(testRedisUrl());
    await deletePrefix(redis, prefix);
    redis.disconnect();
    expect(result).toMatchObject({
      invoices: [1, 2, 3],
      outboxRows: 0,
      handlerCalls: 6,
      inbox: { handled: 3, skippedDuplicates: 3 },
      relay: { active: true, relayed: 3, duplicates: 0 },
    });
  });
});
