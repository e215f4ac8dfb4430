import { ConsoleLogger, Injectable, INestApplicationContext } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import Redis from 'ioredis';
import { Logger as PinoNestLogger, LoggerModule } from 'nestjs-pino';
import { EventrailAdmin, EventrailMessage, EventrailModule, EventrailPublisher, OnEvent, PublishResult } from '../../lib';
import { deletePrefix, testRedisUrl, uniquePrefix, waitFor } from '../support/helpers';

@Injectable()
class Refuser {
  @OnEvent('order.placed', { group: 'billing', ordering: 'partition', maxRetries: 1, retryBackoffMs: 5 })
  bill(message: EventrailMessage<{ n: number }>): void {
    throw new Error(`cannot bill ${message.data.n}`);
  }
}

type Line = Record<string, unknown>;

/** Boots a module with `Refuser`, publishes one event and waits until it is dead-lettered (after one retry). */
async function failOne(prefix: string, imports: unknown[], useLogger: (app: INestApplicationContext) => void): Promise<PublishResult> {
  const moduleRef = await Test.createTestingModule({
    imports: [EventrailModule.forRoot({ redis: testRedisUrl(), prefix }), ...(imports as never[])],
    providers: [Refuser],
  }).compile();
  useLogger(moduleRef);
  const app = await moduleRef.init();
  try {
    const published = await app.get(EventrailPublisher).publish('order.placed', { n: 7 }, { key: 'order-7' });
    await waitFor(async () => (await app.get(EventrailAdmin).deadLetterCount('billing')) === 1, 'the event dead-lettered');
    return published;
  } finally {
    await app.close();
  }
}

describe('structured log lines', () => {
  const redis = new Redis(testRedisUrl());
  const prefixes: string[] = [];
  const prefix = (): string => {
    prefixes.push(uniquePrefix('logs'));
    return prefixes[prefixes.length - 1];
  };

  afterAll(async () => {
    for (const p of prefixes) await deletePrefix(redis, p);
    redis.disconnect();
  });

  it('reach nestjs-pino with group, partition, eventId, event and offset as fields and the text in msg', async () => {
    const lines: Line[] = [];
    const stream = { write: (line: string) => lines.push(JSON.parse(line) as Line) };
    const published = await failOne(prefix(), [LoggerModule.forRoot({ pinoHttp: [{ level: 'debug' }, stream] })], (app) =>
      app.useLogger(app.get(PinoNestLogger)),
    );
    const ids = { group: 'billing', partition: 0, eventId: published.id, event: 'order.placed', offset: published.offset };

    const retry = lines.find((l) => l.context === 'MessageProcessor' && l.level === 40);
    expect(retry).toMatchObject({ ...ids, attempt: 1 });
    expect(retry?.msg).toMatch(
      /^Event \S+ \(order\.placed\) failed in group "billing" partition 0, attempt 1; retrying in \d+ ms: Error: cannot bill 7$/,
    );
    expect(typeof retry?.delayMs).toBe('number');

    const letter = lines.find((l) => l.context === 'DeadLetterSink');
    expect(letter).toMatchObject({ ...ids, level: 50, reason: 'retries-exhausted', attempts: 2 });
    expect(letter?.msg).toMatch(
      /^Dead-lettered event .* in group "billing" partition 0 after 2 attempt\(s\), retries-exhausted: cannot bill 7$/,
    );

    // The per-throw debug line carries them too.
    expect(lines.find((l) => l.context === 'MessageProcessor' && l.level === 20)).toMatchObject({ ...ids, handler: 'Refuser.bill' });
  });

  it('print as plain text on the console, without an object dump', async () => {
    const written: string[] = [];
    const console = new ConsoleLogger({ colors: false, logLevels: ['warn', 'error'] });
    const spy = jest.spyOn(process.stdout, 'write').mockImplementation((chunk: string | Uint8Array) => {
      written.push(String(chunk));
      return true;
    });
    const spyErr = jest.spyOn(process.stderr, 'write').mockImplementation((chunk: string | Uint8Array) => {
      written.push(String(chunk));
      return true;
    });
    try {
      await failOne(prefix(), [], (app) => app.useLogger(console));
    } finally {
      spy.mockRestore();
      spyErr.mockRestore();
    }
    const retry = written.find((w) => w.includes('[MessageProcessor]'));
    expect(retry).toMatch(
      /WARN \[MessageProcessor\] Event \S+ \(order\.placed\) failed in group "billing" partition 0, attempt 1; retrying in/,
    );
    const letter = written.find((w) => w.includes('[DeadLetterSink]'));
    expect(letter).toMatch(/ERROR \[DeadLetterSink\] Dead-lettered event .* retries-exhausted: cannot bill 7/);
    for (const line of [retry, letter]) expect(line).not.toMatch(/Object\(|msg:|\{/);
  });
});
