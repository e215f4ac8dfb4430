import { inspect } from 'node:util';
import { logRecord } from '../../lib/util/log-record';

describe('LogRecord', () => {
  const record = logRecord('Event e1 failed in group "g" partition 2', {
    group: 'g',
    partition: 2,
    eventId: 'e1',
    event: undefined,
    offset: '1-0',
  });

  it('carries the fields as own enumerable properties, the text in msg, and leaves out undefined ones', () => {
    expect({ ...record }).toEqual({
      group: 'g',
      partition: 2,
      eventId: 'e1',
      offset: '1-0',
      msg: 'Event e1 failed in group "g" partition 2',
    });
    expect(Object.keys(record)).not.toContain('event');
  });

  it('reads as its text wherever it is turned into a string or inspected', () => {
    expect(String(record)).toBe('Event e1 failed in group "g" partition 2');
    expect(inspect(record)).toBe('Event e1 failed in group "g" partition 2');
  });

  it('prints a stack under the text when inspected, and keeps it as a field', () => {
    const withStack = logRecord('Boom', { group: 'g', stack: 'Error: boom\n    at x' });
    expect(inspect(withStack)).toBe('Boom\nError: boom\n    at x');
    expect(String(withStack)).toBe('Boom');
    expect(withStack.stack).toBe('Error: boom\n    at x');
  });

  it('keeps msg even when a field is named msg', () => {
    expect(logRecord('text', { msg: 'other' }).msg).toBe('text');
  });
});
