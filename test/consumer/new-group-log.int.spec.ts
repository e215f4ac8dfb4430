import { INestApplicationContext, Injectable, LoggerService } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import Redis from 'ioredis';
import { EventrailAdmin, EventrailMessage, EventrailModule, EventrailPublisher, OnEvent } from '../../lib';
import { deletePrefix, testRedisUrl, uniquePrefix, waitFor } from '../support/helpers';

@Injectable()
class Mailer {
  @OnEvent('receipt.issued', 'mailer')
  send(_message: EventrailMessage<{ n: number }>): void {}
}

@Injectable()
class Audit {
  @OnEvent('receipt.issued', { group: 'audit', initialOffset: { mode: 'fromEnd' } })
  record(_message: EventrailMessage<{ n: number }>): void {}
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
  debug(message: unknown): void {
    this.lines.push(String(message));
  }
  verbose(message: unknown): void {
    this.lines.push(String(message));
  }
}

describe('the startup line of a new group that starts at the beginning of the log', () => {
  const redis = new Redis(testRedisUrl());
  let prefix: string;

  beforeEach(() => {
    prefix = uniquePrefix('newgroup');
  });
  afterEach(() => deletePrefix(redis, prefix));
  afterAll(() => redis.disconnect());

  /** Boots an app with `providers` on the log, runs `whileUp`, closes it, and returns what it logged. */
  async function run(providers: unknown[], whileUp: (app: INestApplicationContext) => Promise<unknown>): Promise<string[]> {
    const logger = new CapturedLogger();
    const moduleRef = await Test.createTestingModule({
      imports: [EventrailModule.forRoot({ redis: testRedisUrl(), prefix, partitions: 3 })],
      providers: providers as never[],
    }).compile();
    moduleRef.useLogger(logger);
    const app = await moduleRef.init();
    try {
      await whileUp(app);
    } finally {
      await app.close();
    }
    return logger.lines;
  }

  const caughtUp = (group: string) => async (app: INestApplicationContext) =>
    waitFor(async () => (await app.get(EventrailAdmin).group(group)).lag === 0, `${group} caught up`);

  it('says how many entries it will handle, once: not for the same group again, nor for one starting at the end', async () => {
    await run([], async (app) => {
      await app
        .get(EventrailPublisher)
        .publishMany(Array.from({ length: 7 }, (_, n) => ({ event: 'receipt.issued', data: { n }, key: `r${n}` })));
    });

    const first = await run([Mailer, Audit], caughtUp('mailer'));
    const newLines = first.filter((line) => line.includes('is new'));
    expect(newLines).toEqual([
      `Group "mailer" is new and starts at the beginning: 7 entries to handle (initialOffset { mode: 'fromEnd' } starts after them)`,
    ]);

    const again = await run([Mailer], caughtUp('mailer'));
    expect(again.some((line) => line.includes('is new'))).toBe(false);
    // The app did start the group: the line's absence is not a silent logger.
    expect(again.some((line) => line.includes('Group "mailer": took partition'))).toBe(true);
  });

  it('says nothing for a new group on an empty log', async () => {
    const lines = await run([Mailer], caughtUp('mailer'));
    expect(lines.some((line) => line.includes('Group "mailer": took partition'))).toBe(true);
    expect(lines.some((line) => line.includes('is new'))).toBe(false);
  });
});
