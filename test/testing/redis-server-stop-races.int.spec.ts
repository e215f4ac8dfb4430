import { startRedisServer, type RedisServer } from '../../lib/testing/redis-server';

function isRunning(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** Resolves with 'settled' once `work` settles, or 'pending' after `ms`. */
function within(work: Promise<unknown>, ms: number): Promise<'settled' | 'pending'> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<'pending'>((resolve) => (timer = setTimeout(() => resolve('pending'), ms)));
  return Promise.race([work.then(() => 'settled' as const), late]).finally(() => clearTimeout(timer));
}

describe('RedisServer.stop() under odd schedules', () => {
  let server: RedisServer | undefined;
  afterEach(async () => {
    if (server && isRunning(server.pid)) process.kill(server.pid, 'SIGKILL');
    server = undefined;
  });

  it('resolves when the server was SIGKILLed from outside, just before or well before', async () => {
    for (const settleFirst of [false, true]) {
      server = await startRedisServer();
      process.kill(server.pid, 'SIGKILL');
      if (settleFirst) await new Promise((resolve) => setTimeout(resolve, 200));
      expect({ settleFirst, stop: await within(server.stop(), 5_000) }).toEqual({ settleFirst, stop: 'settled' });
      expect(isRunning(server.pid)).toBe(false);
    }
  });

  it('resolves for every caller when called twice at once, with either signal, and again after', async () => {
    for (const signal of ['SIGKILL', 'SIGTERM'] as const) {
      server = await startRedisServer();
      const both = Promise.all([server.stop(signal), server.stop(signal)]);
      expect({ signal, both: await within(both, 8_000) }).toEqual({ signal, both: 'settled' });
      expect(isRunning(server.pid)).toBe(false);
      expect(await within(server.stop(), 1_000)).toBe('settled');
    }
  });
});
