import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { Controller, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { EventPattern, Payload } from '@nestjs/microservices';
import { lastValueFrom } from 'rxjs';
import { ClientClosedError, EventrailClient, EventrailServer } from '../../lib/microservices';
import { testRedisUrl, uniquePrefix, waitFor } from '../support/helpers';
import { freePort } from '../support/redis-server';

const progress: string[] = [];
/** Lets the running handler finish, once the test has seen both closes' state. */
let finishHandler: () => void = () => undefined;

@Controller()
class SlowHandlers {
  @EventPattern<string>('report.requested')
  async requested(@Payload() data: { n: number }): Promise<void> {
    progress.push(`start ${data.n}`);
    await new Promise<void>((resolve) => (finishHandler = resolve));
    progress.push(`end ${data.n}`);
  }
}

@Module({ controllers: [SlowHandlers] })
class SlowModule {}

const ROOT = join(__dirname, '..', '..');

function runClosingProcess(kind: 'client' | 'server'): Promise<{ aliveAfterCloseMs: number }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['-r', '@swc-node/register', join(__dirname, 'support', 'close-during-start.process.ts'), kind], {
      cwd: ROOT,
      stdio: ['ignore', 'pipe', 'ignore'],
    });
    let out = '';
    child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
    child.once('error', reject);
    child.once('close', () => {
      // Nest's logger may write to stdout too: the report is the last JSON line.
      const line = out
        .trim()
        .split('\n')
        .filter((l) => l.startsWith('{'))
        .pop();
      if (line) resolve(JSON.parse(line) as { aliveAfterCloseMs: number });
      else reject(new Error(`no report: ${out}`));
    });
  });
}

describe('closing a transport while it starts, or twice', () => {
  // The abandoned start's startupTimeoutMs (15 s) timer must not hold a process that closed its transport.
  it.each(['client', 'server'] as const)(
    'a process that closed its %s during the start exits soon after the close',
    async (kind) => {
      const { aliveAfterCloseMs } = await runClosingProcess(kind);
      expect(aliveAfterCloseMs).toBeLessThan(3_000);
    },
    60_000,
  );

  it('close() then connect() in the same tick, then close(): that connect fails at once with ClientClosedError', async () => {
    const port = await freePort();
    const client = new EventrailClient({ redis: `redis://127.0.0.1:${port}`, prefix: 'twice', startupTimeoutMs: 8_000 });
    void client.connect().catch(() => undefined);
    // Two callers: one shuts down while another emits (which connects anew).
    const closing = client.close();
    const second = client.connect().then(
      () => 'connected',
      (error: unknown) => error,
    );
    await closing;
    const started = performance.now();
    await client.close();
    const outcome = await second;
    expect({ outcome, quick: performance.now() - started < 1_000 }).toEqual({ outcome: expect.any(ClientClosedError), quick: true });
  }, 20_000);

  it('a second EventrailServer.close() resolves only once the first close has let the running handler finish', async () => {
    const prefix = uniquePrefix('close-twice');
    const transport = new EventrailServer({ redis: testRedisUrl(), prefix, group: 'reports' });
    const app = await NestFactory.createMicroservice(SlowModule, { strategy: transport, logger: false });
    await app.listen();
    const client = new EventrailClient({ redis: testRedisUrl(), prefix });
    await lastValueFrom(client.emit('report.requested', { n: 1 }));
    await client.close();
    await waitFor(() => progress.includes('start 1'), 'the handler to start', 10_000);
    // Two callers shut down (a signal handler and the app's own close, say).
    const first = transport.close();
    let secondDone = false;
    const second = transport.close().then(() => (secondDone = true));
    // The second close is still waiting while the handler runs; the first close's stop then lets it finish.
    await new Promise((resolve) => setImmediate(resolve));
    expect(secondDone).toBe(false);
    finishHandler();
    await second;
    expect(progress).toEqual(['start 1', 'end 1']);
    await first;
    await app.close();
  }, 30_000);
});
