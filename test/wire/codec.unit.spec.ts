import { DecodeError } from '../../lib/errors/decode.error';
import { decodePayload, encodeFields, EntryOrigin, isMalformed, readEntry, RawEntry, redeliveryFields } from '../../lib/wire/codec';
import { derivedEventId, logTag } from '../../lib/wire/event-id';

const ORIGIN: EntryOrigin = { partition: 3, logTag: logTag('eventrail') };

describe('codec', () => {
  it('round-trips an event with an id of its own through the stream fields (the format before lean entries too)', () => {
    const fields = encodeFields({ id: 'e1', event: 'a.b', key: 'k', time: 1234, data: '{"x":1}', headers: '{"traceparent":"t"}' });
    expect(fields).toEqual(['id', 'e1', 'event', 'a.b', 'key', 'k', 'time', '1234', 'data', '{"x":1}', 'headers', '{"traceparent":"t"}']);
    const entry = readEntry('5-0', fields, ORIGIN) as RawEntry;
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

  it('writes a lean entry without an id: only event, key, data and headers', () => {
    expect(encodeFields({ event: 'a.b', key: undefined, data: '{}', headers: undefined })).toEqual(['event', 'a.b', 'data', '{}']);
    expect(encodeFields({ event: 'a.b', key: 'k', time: 1234, data: '{}', headers: '{"h":"v"}' })).toEqual([
      'event',
      'a.b',
      'key',
      'k',
      'data',
      '{}',
      'headers',
      '{"h":"v"}',
    ]);
  });

  it('reads a lean or foreign entry (event and data only) with the derived id and the stream id time', () => {
    const entry = readEntry('1700000000000-3', ['event', 'order.created', 'data', '[1,2]'], ORIGIN) as RawEntry;
    expect(entry).toMatchObject({ key: null, time: 1700000000000 });
    expect(entry.id).toBe(derivedEventId(ORIGIN.logTag, 3, '1700000000000-3'));
    expect(entry.id).toMatch(/^018bcfe5-6800-7/);
    expect(decodePayload(entry).data).toEqual([1, 2]);
    const again = readEntry('1700000000000-3', ['event', 'order.created', 'data', '[1,2]'], ORIGIN) as RawEntry;
    expect(again.id).toBe(entry.id);
    const otherPartition = readEntry('1700000000000-3', ['event', 'order.created', 'data', '[1,2]'], { ...ORIGIN, partition: 4 });
    expect((otherPartition as RawEntry).id).not.toBe(entry.id);
  });

  it('re-delivers a lean entry with its derived id and time spelled out, so it keeps its identity at its new position', () => {
    const entry = readEntry('1700000000000-3', ['event', 'e', 'key', 'k', 'data', '1'], ORIGIN) as RawEntry;
    const fields = redeliveryFields(entry, 'ledger');
    expect(fields).toEqual(['id', entry.id, 'event', 'e', 'key', 'k', 'time', '1700000000000', 'data', '1', 'to', 'ledger']);
    const replayed = readEntry('1800000000000-0', fields, ORIGIN) as RawEntry;
    expect(replayed).toMatchObject({ id: entry.id, time: 1700000000000, to: 'ledger' });
  });

  it.each<[string[], string]>([
    [['data', '{}'], 'missing field "event"'],
    [['event', 'x'], 'missing field "data"'],
    [['event', 'x', 'data', '1', 'time', 'soon'], 'field "time" is not a number'],
  ])('marks %j malformed', (fields, reason) => {
    const entry = readEntry('1-0', fields, ORIGIN);
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
