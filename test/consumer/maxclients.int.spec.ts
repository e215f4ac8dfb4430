import { INestApplicationContext, Injectable, LoggerService } from '@nestjs/common';
import { TerminusModule } from '@nestjs/terminus';
import { Test } from '@nestjs/testing';
import Redis from 'ioredis';
import {
  EventrailAdmin,
  EventrailConsumers,
  EventrailMessage,
  EventrailModule,
  EventrailPublisher,
  OnEvent,
  partitionForKey,
  RedisUnavailableError,
} from '../../lib';
import { EventrailHealthIndicator, EventrailHealthModule } from '../../lib/health';
import { uniquePrefix, waitFor } from '../support/helpers';
import { RedisServer, startRedisServer } from '../support/redis-server';

const PARTITIONS = 6;
/** Blocking read connections Redis has room for, past what the app opens besides them. */
const READERS = 2;
const LOCK_TTL_MS = 900;

const handled = new Set<string>();

@Injectable()
class Mailer {
  @OnEvent('receipt.issued', { group: 'mailer', lockTtlMs: LOCK_TTL_MS, heartbeatTtlMs: LOCK_TTL_MS })
  send(message: EventrailMessage<{ n: number }>): void {
    handled.add(message.id);
  }
}

/** Every message logged at any level, as text. */
class CapturedLogger implements LoggerService {
  readonly lines: string[] = [];
  log(message: unknown): void {
    this.lines.push(String(message));
  }
  error(message: unknown): void {
    this.lines.push(String(message));
  }
  warn(message: unknown): void {
    this.lines.push(String(message));
  }
}

interface Report {
  status: 'up' | 'down';
  message?: string;
}

/**
 * At Redis's `maxclients` a worker cannot open a blocking read connection
 * for every partition it takes. It must hold only the partitions it can
 * read: the rest go back (free for another member), a warning names them
 * and the cause, and health is not `up` while they are read by nobody.
 */
describe('a worker at Redis maxclients', () => {
  let server: RedisServer;
  let redis: Redis;
  let app: INestApplicationContext | undefined;

  beforeAll(async () => {
    server = await startRedisServer();
    redis = new Redis(server.url);
    await waitFor(async () => (await connectedClients()) === 1, 'only this test connection'); // the start's probes closed
  });
  afterEach(async () => {
    await redis.config('SET', 'maxclients', '10000');
    await app?.close();
    app = undefined;
    // The app drops its read connections without a QUIT: Redis counts them until it sees them close, and the
    // next test sets maxclients from connected_clients, which would leave it room for what it must be refused.
    await waitFor(async () => (await connectedClients()) === 1, 'only this test connection left');
  });
  afterAll(async () => {
    redis.disconnect();
    await server.stop();
  });

  const connectedClients = async (): Promise<number> => Number(/connected_clients:(\d+)/.exec(await redis.info('clients'))?.[1]);

  /** An app of the group on the small server, not started, with its log lines captured, and events waiting in every partition. */
  const boot = async (
    options: { startupTimeoutMs?: number } = {},
  ): Promise<{ started: INestApplicationContext; logger: CapturedLogger; keys: string[] }> => {
    handled.clear();
    const logger = new CapturedLogger();
    const moduleRef = await Test.createTestingModule({
      imports: [
        EventrailModule.forRoot({ redis: server.url, prefix: uniquePrefix('maxcl'), partitions: PARTITIONS, autoStart: false, ...options }),
        TerminusModule,
        EventrailHealthModule,
      ],
      providers: [Mailer],
    }).compile();
    moduleRef.useLogger(logger);
    const started = await moduleRef.init();
    app = started;
    const keys = Array.from({ length: 60 }, (_, i) => `receipt-${i}`);
    expect(new Set(keys.map((key) => partitionForKey(key, PARTITIONS))).size).toBe(PARTITIONS);
    return { started, logger, keys };
  };

  const publish = (started: INestApplicationContext, keys: string[], round: number) =>
    started.get(EventrailPublisher).publishMany(keys.map((key, n) => ({ event: 'receipt.issued', key, data: { n: round * 1000 + n } })));

  /**
   * Waits until this process holds no partition it does not read (none leased to it with lag) while some
   * partitions wait unread, and it warned; then checks the warning and the health report name them.
   */
  const expectUnreadReleased = async (started: INestApplicationContext, logger: CapturedLogger): Promise<number[]> => {
    const admin = started.get(EventrailAdmin);
    const workerId = started.get(EventrailConsumers).workerId;
    const warned = () => logger.lines.find((line) => line.includes('could not open') && line.includes('mailer'));
    const settled = await waitFor(async () => {
      const status = await admin.group('mailer');
      const heldUnread = status.partitions.filter((p) => p.leaseOwner === workerId && p.lag > 0);
      const unread = status.partitions.filter((p) => p.lag > 0);
      return warned() && heldUnread.length === 0 && unread.length > 0 ? status : null;
    }, 'every partition it holds read, the others released, and a warning').catch(async (error: Error) => {
      const partitions = (await admin.group('mailer')).partitions.map((p) => [p.partition, p.leaseOwner, p.lag]);
      throw new Error(`${error.message}\n[partition, lease owner, lag]: ${JSON.stringify(partitions)}`);
    });
    const unread = settled.partitions.filter((p) => p.lag > 0).map((p) => p.partition);
    // The warning names the partitions it gave back and why.
    const line = warned() as string;
    for (const partition of unread) expect(line).toMatch(new RegExp(`\\b${partition}\\b`));
    expect(line).toMatch(/maxclients|max number of clients/);
    const down = await report(started);
    expect(down.status).toBe('down');
    for (const partition of unread) expect(down.message).toMatch(new RegExp(`\\b${partition}\\b`));
    return unread;
  };

  const report = async (started: INestApplicationContext): Promise<Report> =>
    (await started.get(EventrailHealthIndicator).isHealthy('eventrail')).eventrail as Report;

  /** Room again: it takes them back and reads them, and health is up. */
  const expectAllReadOnceRaised = async (started: INestApplicationContext, logger: CapturedLogger, total: number): Promise<void> => {
    await redis.config('SET', 'maxclients', '10000');
    await waitFor(
      async () => (await started.get(EventrailAdmin).group('mailer')).lag === 0 && handled.size === total,
      () => `everything handled after maxclients was raised (${handled.size} of ${total})`,
    );
    await waitFor(async () => (await report(started)).status === 'up', 'health up once every partition is read');
    expect(logger.lines.some((l) => l.includes('mailer') && l.includes('reads') && l.includes('again'))).toBe(true);
  };

  it('holds only the partitions it can read when it takes them, releases and names the rest, and health is down until it reads them', async () => {
    const { started, logger, keys } = await boot();
    await publish(started, keys, 0);
    // Room for what the app holds now, its rebalance subscriber, and READERS blocking reads: fewer than PARTITIONS.
    await redis.config('SET', 'maxclients', String((await connectedClients()) + 1 + READERS));
    await started.get(EventrailConsumers).start();
    await expectUnreadReleased(started, logger);
    await expectAllReadOnceRaised(started, logger, keys.length);
  });

  it('start() with no room for its connections waits up to startupTimeoutMs, then rejects with RedisUnavailableError naming maxclients', async () => {
    const { started } = await boot({ startupTimeoutMs: 1_000 });
    // Room for what the app holds now and nothing more: its rebalance subscriber is refused.
    await redis.config('SET', 'maxclients', String(await connectedClients()));
    const refused = await started
      .get(EventrailConsumers)
      .start()
      .then(
        () => null,
        (caught: unknown) => caught,
      );
    expect(refused).toBeInstanceOf(RedisUnavailableError);
    // Redis's own reply (ioredis 6.0 failed the SUBSCRIBE with it), or eventrail's reading of INFO (6.1 fails it with the retry limit).
    expect((refused as Error).message).toMatch(
      /startupTimeoutMs \(1000 ms\).*(max number of clients reached|Redis is at maxclients \(\d+ of \d+ connections)/,
    );

    // Room again while a start waits: it goes on.
    const starting = started.get(EventrailConsumers).start();
    await redis.config('SET', 'maxclients', '10000');
    await starting;
    const keys = ['receipt-1'];
    await publish(started, keys, 0);
    await waitFor(() => handled.size === 1, 'handled once started');
  });

  it('gives back a partition whose read connection drops and cannot come back, and takes it again once it can', async () => {
    const { started, logger, keys } = await boot();
    await started.get(EventrailConsumers).start();
    await publish(started, keys, 0);
    await waitFor(() => handled.size === keys.length, 'the first round handled with room for every read connection');
    // The blocking reads are the connections waiting in XREAD; every other one stays. A worker sends its next
    // XREAD after it committed what it handled: waited for, not assumed done once the handlers ran.
    const blockedReads = async (): Promise<string[]> =>
      String(await redis.client('LIST'))
        .split('\n')
        .filter((line: string) => / cmd=xread\b/.test(line))
        .map((line) => /\bid=(\d+)/.exec(line)?.[1] as string);
    let readers: string[] = [];
    await waitFor(
      async () => (readers = await blockedReads()).length >= PARTITIONS,
      () => `a read connection per partition waiting in XREAD (${readers.length})`,
    );
    expect(readers).toHaveLength(PARTITIONS);
    await redis.config('SET', 'maxclients', String((await connectedClients()) - PARTITIONS + READERS));
    for (const id of readers) await redis.client('KILL', 'ID', id);
    await publish(started, keys, 1);
    await expectUnreadReleased(started, logger);
    await expectAllReadOnceRaised(started, logger, 2 * keys.length);
  });
});
