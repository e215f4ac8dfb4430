import { startRedisServer as start, type RedisServer } from '../../lib/testing/redis-server';

// The starter lives in the testing entry point (`nestjs-eventrail/testing`), which users' Jest setups use too.
export { freePort, waitUntilAnswers } from '../../lib/testing/redis-server';
export type { RedisServer } from '../../lib/testing/redis-server';

/** `startRedisServer` of the testing entry point, with the positional arguments the suites use. */
export function startRedisServer(port?: number, extraArgs: string[] = []): Promise<RedisServer> {
  return start({ port, args: extraArgs });
}
