import { Injectable, LoggerService } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import Redis from 'ioredis';
import { EventrailAdmin, EventrailMessage, EventrailModule, EventrailPublisher, OnEvent } from '../../lib';
import { deletePrefix, testRedisUrl, uniquePrefix, waitFor } from '../support/helpers';
import { describeError } from '../../lib/util/describe-error';

/** What a producer could slip into an error message: retitle the terminal, clear it, reverse the line. */
const HOSTILE = '\u001b]0;pwned\u0007\u001b[2J\u202eevil';
// eslint-disable-next-line no-control-regex
const RAW_CONTROLS = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u202a-\u202e\u2066-\u2069]/;

@Injectable()
class Refuser {
  @OnEvent('order.placed', { group: 'billing', ordering: 'partition', maxRetries: 1, retryBackoffMs: 10 })
  bill(message: EventrailMessage<{ note: string }>): void {
    throw new Error(`cannot bill: ${message.data.note}`);
  }
}

class CapturingLogger implements LoggerService {
  readonly lines: string[] = [];
  log(message: unknown): void {
    this.lines.push(String(message));
  }
  warn(message: unknown): void {
    this.lines.push(String(message));
  }
  error(message: unknown): void {
    this.lines.push(String(message));
  }
  debug(message: unknown): void {
    this.lines.push(String(message));
  }
  verbose(): void {}
}

describe('library logs of producer-controlled text', () => {
  it('show control and bidirectional characters escaped, never raw', async () => {
    const prefix = uniquePrefix('esc');
    const redis = new Redis(testRedisUrl());
    const logger = new CapturingLogger();
    const moduleRef = await Test.createTestingModule({
      imports: [
        EventrailModule.forRoot({
          redis: testRedisUrl(),
          prefix,
          // An exporter that refuses what it was given, naming it: the event's data here, a name in practice.
          metrics: {
            onHandlerError: (_group, _event, error) => {
              throw new Error(`exporter refused: ${describeError(error)}`);
            },
          },
        }),
      ],
      providers: [Refuser],
    }).compile();
    moduleRef.useLogger(logger);
    const app = await moduleRef.init();
    try {
      await app.get(EventrailPublisher).publish('order.placed', { note: HOSTILE });
      await waitFor(async () => (await app.get(EventrailAdmin).deadLetterCount('billing')) === 1, 'the event dead-lettered');
      const failures = logger.lines.filter((line) => line.includes('cannot bill'));
      // The retry warning and the dead-letter error at least (a debug line per throw too, with a logger that takes debug).
      expect(failures.some((line) => line.startsWith('Event '))).toBe(true);
      expect(failures.some((line) => line.startsWith('Dead-lettered event '))).toBe(true);
      expect(failures.some((line) => line.startsWith('metrics.onHandlerError threw'))).toBe(true);
      for (const line of failures) {
        expect(line).not.toMatch(RAW_CONTROLS);
        expect(line).toContain('cannot bill: \\x1b]0;pwned\\x07\\x1b[2J\\u202eevil');
      }
      // The dead letter itself keeps the message as it was.
      expect((await app.get(EventrailAdmin).deadLetters('billing'))[0].error.message).toBe(`cannot bill: ${HOSTILE}`);
    } finally {
      await app.close();
      await deletePrefix(redis, prefix);
      redis.disconnect();
    }
  });
});
