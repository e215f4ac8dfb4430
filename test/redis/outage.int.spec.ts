import { Injectable, LoggerService } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Redis from 'ioredis';
import { EventrailMessage, EventrailModule, EventrailPublisher, OnEvent, RedisUnavailableError } from '../../lib';
import { EventrailKeys } from '../../lib/redis/keys';
import { waitFor } from '../support/helpers';
import { freePort, RedisServer, startRedisServer } from '../support/redis-server';

const PREFIX = 'outage';
const keys = new EventrailKeys(PREFIX, 1);
const handled: number[] = [];

@Injectable()
class Recorder {
  @OnEvent('tick', { group: 'recorder', lockTtlMs: 2_000, heartbeatTtlMs: 2_000 })
  record(message: EventrailMessage<{ n: number }>): void {
    handled.push(message.data.n);
  }
}

class CapturingLogger implements LoggerService {
  readonly lines: string[] = [];
  log(message: unknown): void {
    this.lines.push(`log ${String(message)}`);
  }
  warn(message: unknown): void {
    this.lines.push(`warn ${String(message)}`);
  }
  error(message: unknown): void {
    this.lines.push(`error ${String(message)}`);
  }
  debug(message: unknown): void {
    this.lines.push(`debug ${String(message)}`);
  }
  verbose(): void {}
}

async function boot(url: string, logger?: LoggerService): Promise<{ close(): Promise<void>; publisher: EventrailPublisher }> {
  const moduleRef = await Test.createTestingModule({
    imports: [EventrailModule.forRoot({ redis: url, prefix: PREFIX })],
    providers: [Recorder],
  }).compile();
  if (logger) moduleRef.useLogger(logger);
  const app = await moduleRef.init();
  return { close: () => app.close(), publisher: app.get(EventrailPublisher) };
}

describe('Redis persistence and outages', () => {
  const servers: RedisServer[] = [];
  const dirs: string[] = [];
  afterEach(async () => {
    await Promise.all(servers.splice(0).map((s) => s.stop()));
    for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
    handled.length = 0;
  });

  it('warns at startup when Redis has no AOF, with the fix', async () => {
    const server = await startRedisServer();
    servers.push(server);
    const logger = new CapturingLogger();
    const app = await boot(server.url, logger);
    await app.close();
    expect(logger.lines.find((l) => l.includes('appendonly no'))).toMatch(/^warn .*CONFIG SET appendonly yes/);
  });

  it('keeps working when CONFIG is disabled, as on managed Redis', async () => {
    const server = await startRedisServer(undefined, ['--rename-command', 'CONFIG', '""']);
    servers.push(server);
    const logger = new CapturingLogger();
    const app = await boot(server.url, logger);
    const { offset } = await app.publisher.publish('tick', { n: 1 });
    await waitFor(() => handled.includes(1), 'handled');
    await app.close();
    expect(offset).toMatch(/^\d+-\d+$/);
    // INFO answers what CONFIG would have (this server runs without AOF, which is worth the warning); nothing is left unchecked.
    expect(logger.lines.some((l) => l.startsWith('warn') && l.includes('appendonly no'))).toBe(true);
    expect(logger.lines.some((l) => l.startsWith('warn') && l.includes('not checked'))).toBe(false);
  });

  it('pauses while Redis is down and resumes on its own after a restart, skipping nothing', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'eventrail-aof-'));
    dirs.push(dir);
    const port = await freePort();
    const aof = ['--appendonly', 'yes', '--appendfsync', 'always', '--dir', dir];
    let server = await startRedisServer(port, aof);
    servers.push(server);
    const app = await boot(server.url);
    for (let n = 1; n <= 50; n++) await app.publisher.publish('tick', { n });
    await waitFor(() => handled.length >= 50, 'first 50 handled');

    await server.stop('SIGKILL');
    servers.pop();
    await expect(app.publisher.publish('tick', { n: -1 })).rejects.toBeInstanceOf(RedisUnavailableError);
    server = await startRedisServer(port, aof);
    servers.push(server);

    const accepted = await waitFor(() => app.publisher.publish('tick', { n: 51 }).catch(() => undefined), 'publish after restart');
    for (let n = 52; n <= 100; n++) await app.publisher.publish('tick', { n });
    await waitFor(
      () => new Set(handled).size === 100,
      () => `handled ${new Set(handled).size} of 100`,
      30_000,
    );
    const redis = new Redis(server.url);
    const last = await redis.xrevrange(keys.stream(0), '+', '-', 'COUNT', 1);
    await waitFor(async () => (await redis.get(keys.offset('recorder', 0))) === last[0][0], 'committed to the end', 30_000);
    redis.disconnect();
    await app.close();
    expect(accepted.partition).toBe(0);
    expect([...new Set(handled)].sort((a, b) => a - b)).toEqual(Array.from({ length: 100 }, (_, i) => i + 1));
    expect(handled).not.toContain(-1);
  });
});
