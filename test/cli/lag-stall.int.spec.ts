import { Injectable } from '@nestjs/common';
import { EventrailAdmin, EventrailPublisher, OnEvent } from '../../lib';
import { createApp } from '../support/app';
import { startRedisServer, type RedisServer } from '../support/redis-server';
import { uniquePrefix, waitFor } from '../support/helpers';
import { assertBuilt, cliEnv, CliProcess, killAll } from './cli.harness';

// The CLI's exporter has its own connection to Redis, with no command timeout of its own: each request
// must be bounded by --timeout-ms, whatever Redis does, and a bad path is the caller's mistake.

@Injectable()
class Billing {
  @OnEvent('order.placed', 'billing')
  bill(): void {}
}

/** GET `url`, or 'no answer' if none came within `ms`. */
async function get(url: string, ms: number): Promise<{ status: number; body: string; ms: number } | 'no answer'> {
  const started = performance.now();
  try {
    const response = await fetch(url, { signal: AbortSignal.timeout(ms) });
    return { status: response.status, body: await response.text(), ms: performance.now() - started };
  } catch (error) {
    if ((error as Error).name === 'TimeoutError') return 'no answer';
    throw error;
  }
}

describe('eventrail metrics: every request bounded', () => {
  let server: RedisServer;
  let prefix: string;

  beforeAll(() => assertBuilt());
  beforeEach(async () => {
    server = await startRedisServer();
    prefix = uniquePrefix('cli-lag-stall');
    const seed = await createApp({ redis: server.url, prefix, partitions: 1 }, [Billing]);
    await seed.get(EventrailPublisher).publish('order.placed', {});
    await waitFor(async () => {
      const billing = await seed.get(EventrailAdmin).group('billing');
      return billing.lag === 0 && billing.partitions[0].committed !== null;
    }, 'billing caught up');
    await seed.close();
    const writer = await createApp({ redis: server.url, prefix, partitions: 1 });
    for (let i = 0; i < 4; i++) await writer.get(EventrailPublisher).publish('order.placed', { i });
    await writer.close();
  }, 30_000);
  afterEach(async () => {
    killAll();
    process.kill(server.pid, 'SIGCONT');
    await server.stop();
  });

  async function serve(args: string[]): Promise<string> {
    const exporter = new CliProcess(['metrics', '--listen', '0', ...args], cliEnv(prefix, { EVENTRAIL_REDIS_URL: server.url }));
    await exporter.waitForOutput((p) => /on http:\/\/\S+:\d+ /.test(p.stderr), 'the exporter serves');
    return /on (http:\/\/\S+:\d+) /.exec(exporter.stderr)![1];
  }

  it('answers every route with 503 within --timeout-ms, and the next requests at once', async () => {
    const url = await serve(['--timeout-ms', '500']);
    expect(await get(`${url}/lag/billing`, 5000)).toMatchObject({ status: 200, body: expect.stringContaining('"backlog":4') });
    process.kill(server.pid, 'SIGSTOP');
    const answers: Array<Awaited<ReturnType<typeof get>>> = [];
    for (const path of ['/lag/billing', '/metrics', '/lag', '/lag/billing', '/metrics']) answers.push(await get(`${url}${path}`, 5000));
    console.log(
      `Redis frozen, --timeout-ms 500: ${answers.map((a) => (a === 'no answer' ? a : `${a.status} in ${a.ms.toFixed(0)} ms`)).join(', ')}`,
    );
    for (const answer of answers) {
      expect(answer).toMatchObject({ status: 503, body: expect.stringMatching(/timeout-ms|timeoutMs/) });
      expect((answer as { ms: number }).ms).toBeLessThan(2000);
    }
    process.kill(server.pid, 'SIGCONT');
    await waitFor(async () => {
      const answer = await get(`${url}/metrics`, 5000);
      return answer !== 'no answer' && /eventrail_group_backlog\{group="billing"\} 4/.test(answer.body);
    }, 'the gauges once Redis answers again');
  });

  it('with --refresh-ms, stops serving the last read once Redis stopped answering', async () => {
    const url = await serve(['--refresh-ms', '100', '--timeout-ms', '500']);
    await waitFor(async () => {
      const answer = await get(`${url}/metrics`, 5000);
      return answer !== 'no answer' && /eventrail_group_backlog\{group="billing"\} 4/.test(answer.body);
    }, 'a scheduled read');
    process.kill(server.pid, 'SIGSTOP');
    const frozenAt = performance.now();
    await waitFor(async () => {
      const answer = await get(`${url}/metrics`, 5000);
      return answer !== 'no answer' && answer.status === 503;
    }, 'a scrape that fails rather than repeat the last read');
    const failedAfter = performance.now() - frozenAt;
    console.log(`--refresh-ms 100 --timeout-ms 500: /metrics answers 503 ${failedAfter.toFixed(0)} ms after Redis froze`);
    expect(failedAfter).toBeLessThan(500 + 100 + 1500);
  });

  it('answers 400 to a group name whose percent-encoding is broken', async () => {
    const url = await serve([]);
    const answer = await get(`${url}/lag/%E0`, 5000);
    expect(answer).toMatchObject({ status: 400, body: expect.stringContaining('%E0') });
  });
});
