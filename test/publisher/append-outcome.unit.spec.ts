import { ReplyError } from 'ioredis';
import { PublishManyError, RedisUnavailableError } from '../../lib';
import { AppendRefused, outcomeOf } from '../../lib/publisher/append-outcome';

/** What a failed append's error says of the event: refused by Redis (known not appended) or unanswered (unknown). */
describe('append outcomes', () => {
  it('counts an error reply or a script report as not appended, and anything else as unknown', () => {
    expect(outcomeOf(new ReplyError("OOM command not allowed when used memory > 'maxmemory'."))).toBe('not-appended');
    expect(outcomeOf(new AppendRefused("OOM command not allowed when used memory > 'maxmemory'."))).toBe('not-appended');
    expect(outcomeOf(new AppendRefused('GUARDED not appended: a run this call sent to the partition before this one was not'))).toBe(
      'not-appended',
    );
    // A lost connection or a command that timed out: it may have run.
    expect(outcomeOf(new Error('Connection is closed.'))).toBe('unknown');
    expect(outcomeOf(new Error('Command timed out'))).toBe('unknown');
    expect(outcomeOf(new Error('no reply'))).toBe('unknown');
  });

  it('tells a run the guard held back from the refusal that caused it', () => {
    expect(new AppendRefused('GUARDED not appended: ...').heldBack).toBe(true);
    expect(new AppendRefused('OOM command not allowed').heldBack).toBe(false);
  });

  it('says how many events were appended, refused and unknown, and is a RedisUnavailableError', () => {
    const cause = new ReplyError('OOM command not allowed');
    const error = new PublishManyError(
      ['appended', 'not-appended', 'unknown', 'not-appended'],
      [{ id: 'a', partition: 0, offset: '1-0' }, undefined, undefined, undefined],
      cause,
    );
    expect(error).toBeInstanceOf(RedisUnavailableError);
    expect(error.name).toBe('PublishManyError');
    expect(error.cause).toBe(cause);
    expect(error.message).toBe(
      'Redis is unavailable: publishMany of 4 event(s) failed: 1 appended, 2 not appended, 1 unknown (sent, no answer) ' +
        '(outcomes says which) (OOM command not allowed)',
    );
  });
});
