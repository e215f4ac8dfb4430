import { Injectable, LoggerService } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import { TerminusModule } from '@nestjs/terminus';
import { EventrailMessage, EventrailModule, EventrailModuleOptions, EventrailPublisher, InvalidOptionError, OnEvent } from '../../lib';
import { EvictionPolicyError } from '../../lib/errors/eviction-policy.error';
import { resolveModuleOptions } from '../../lib/module/eventrail.options';
import { EventrailHealthIndicator, EventrailHealthModule } from '../../lib/health';
import { uniquePrefix, waitFor } from '../support/helpers';
import { RedisServer, startRedisServer } from '../support/redis-server';

const handled: number[] = [];

@Injectable()
class Recorder {
  @OnEvent('tick', 'recorder')
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
  debug(): void {}
  verbose(): void {}
}

const EVICTING = ['--maxmemory-policy', 'allkeys-lru'];
const NO_CONFIG = ['--rename-command', 'CONFIG', '""'];

describe('maxmemory-policy other than noeviction', () => {
  const servers: RedisServer[] = [];
  const closers: Array<() => Promise<void>> = [];
  afterEach(async () => {
    for (const close of closers.splice(0)) await close();
    await Promise.all(servers.splice(0).map((s) => s.stop()));
    handled.length = 0;
  });

  const server = async (args: string[]): Promise<RedisServer> => {
    const started = await startRedisServer(undefined, args);
    servers.push(started);
    return started;
  };

  /** The app as a user builds it, with the health indicator; resolves once it started (or rejects with why it did not). */
  const boot = async (url: string, options: EventrailModuleOptions = {}) => {
    const logger = new CapturingLogger();
    const moduleRef = await Test.createTestingModule({
      imports: [EventrailModule.forRoot({ redis: url, prefix: uniquePrefix('evict'), ...options }), TerminusModule, EventrailHealthModule],
      providers: [Recorder],
    }).compile();
    moduleRef.useLogger(logger);
    const app = await moduleRef.init();
    closers.push(() => app.close());
    const health = async () => (await app.get(EventrailHealthIndicator).isHealthy()).eventrail as Record<string, unknown>;
    return { app, logger, health };
  };

  const evictionWarning = (logger: CapturingLogger): string | undefined =>
    logger.lines.find((l) => l.startsWith('warn') && l.includes('maxmemory-policy'));

  for (const [how, args] of [
    ['read with CONFIG GET', EVICTING],
    ['read from INFO memory where CONFIG is disabled (managed Redis)', [...EVICTING, ...NO_CONFIG]],
  ] as const) {
    it(`is reported at startup with the fix and in the health details, and consuming goes on (${how})`, async () => {
      const redis = await server([...args]);
      const { app, logger, health } = await boot(redis.url);
      expect(evictionWarning(logger)).toMatch(
        /^warn Redis 127\.0\.0\.1:\d+ \(maxmemory-policy allkeys-lru\) evicts keys .*CONFIG SET maxmemory-policy noeviction/,
      );

      await app.get(EventrailPublisher).publish('tick', { n: 1 });
      await waitFor(() => handled.includes(1), 'handled');
      const report = await health();
      expect(report).toMatchObject({
        status: 'up',
        evictionPolicies: [{ node: `127.0.0.1:${redis.port}`, policy: 'allkeys-lru' }],
        warnings: [expect.stringMatching(/maxmemory-policy allkeys-lru: .*Fix: CONFIG SET maxmemory-policy noeviction$/)],
      });
    });

    it(`refuses to start with requireNoEviction, with a typed error naming the policy (${how})`, async () => {
      const redis = await server([...args]);
      const refused = await boot(redis.url, { requireNoEviction: true, startupTimeoutMs: 5_000 }).then(
        () => null,
        (error: unknown) => error,
      );
      expect(refused).toBeInstanceOf(EvictionPolicyError);
      expect((refused as EvictionPolicyError).nodes).toEqual([{ node: `127.0.0.1:${redis.port}`, policy: 'allkeys-lru' }]);
      expect((refused as Error).message).toMatch(/maxmemory-policy allkeys-lru.*CONFIG SET maxmemory-policy noeviction/);
    });
  }

  it('refuses even with allowDegradedStart: a degraded start is for a Redis that does not answer, not for a refused setting', async () => {
    const redis = await server([...EVICTING]);
    await expect(boot(redis.url, { requireNoEviction: true, allowDegradedStart: true })).rejects.toBeInstanceOf(EvictionPolicyError);
  });

  it('says nothing under noeviction, and requireNoEviction starts', async () => {
    const redis = await server(['--maxmemory-policy', 'noeviction']);
    const { logger, health } = await boot(redis.url, { requireNoEviction: true });
    expect(evictionWarning(logger)).toBeUndefined();
    const report = await health();
    expect(report).toMatchObject({ status: 'up', evictionPolicies: [{ policy: 'noeviction' }] });
    expect(report).not.toHaveProperty('warnings');
  });

  it('validates the option', () => {
    expect(resolveModuleOptions({}).requireNoEviction).toBe(false);
    expect(() => resolveModuleOptions({ requireNoEviction: 'yes' as unknown as boolean })).toThrow(InvalidOptionError);
    expect(() => resolveModuleOptions({ requireNoEviction: 'yes' as unknown as boolean })).toThrow(/requireNoEviction/);
  });
});
