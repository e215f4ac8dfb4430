import { DecodeError } from '../../lib/errors/decode.error';
import { decodePayload, encodeFields, isMalformed, readEntry, RawEntry } from '../../lib/log/codec';

describe('codec', () => {
  it('round-trips an event through the stream fields', () => {
    const fields = encodeFields({ id: 'e1', event: 'a.b', key: 'k', time: 1234, data: '{"x":1}', headers: '{"traceparent":"t"}' });
    expect(fields).toEqual(['id', 'e1', 'event', 'a.b', 'key', 'k', 'time', '1234', 'data', '{"x":1}', 'headers', '{"traceparent":"t"}']);
    const entry = readEntry('5-0', fields) as RawEntry;
    expect(entry).toEqual({
      offset: '5-0',
      id: 'e1',
      event: 'a.b',
      key: 'k',
      time: 1234,
      data: '{"x":1}',
      headers: '{"traceparent":"t"}',
      to: undefined,
    });
    expect(decodePayload(entry)).toEqual({ data: { x: 1 }, headers: { traceparent: 't' } });
  });

  it('accepts a minimal foreign entry (event and data only)', () => {
    const entry = readEntry('1700000000000-3', ['event', 'order.created', 'data', '[1,2]']) as RawEntry;
    expect(entry).toMatchObject({ id: '1700000000000-3', key: null, time: 1700000000000 });
    expect(decodePayload(entry).data).toEqual([1, 2]);
  });

  it.each<[string[], string]>([
    [['data', '{}'], 'missing field "event"'],
    [['event', 'x'], 'missing field "data"'],
    [['event', 'x', 'data', '1', 'time', 'soon'], 'field "time" is not a number'],
  ])('marks %j malformed', (fields, reason) => {
    const entry = readEntry('1-0', fields);
    expect(isMalformed(entry)).toBe(true);
    expect((entry as { reason: string }).reason).toContain(reason);
  });

  it.each<[string, string | undefined, string]>([
    ['{not json', undefined, 'field "data" is not valid JSON'],
    ['1', '[1]', 'field "headers" is not a JSON object'],
    ['1', '{"a":1}', 'not a string'],
    ['1', 'nope', 'field "headers" is not valid JSON'],
  ])('refuses to decode data %j with headers %j', (data, headers, reason) => {
    const entry: RawEntry = { offset: '1-0', id: 'x', event: 'e', key: null, time: 1, data, headers, to: undefined };
    expect(() => decodePayload(entry)).toThrow(DecodeError);
    expect(() => decodePayload(entry)).toThrow(reason);
  });
});
