import { CloudEvent, HTTP } from 'cloudevents';
import { EventrailMessage, fromCloudEvent, InvalidCloudEventError, toCloudEvent } from '../../lib';
import { cloudEventId } from '../../lib/cloudevents/cloud-event.codec';
import { resolveModuleOptions } from '../../lib/module/eventrail.options';

function message(overrides: Partial<EventrailMessage> = {}): EventrailMessage {
  return {
    id: '0190c7e4-5b1e-7c3a-9f00-1a2b3c4d5e6f',
    event: 'order.placed',
    data: { orderId: 'o-7', total: 12.5 },
    key: 'o-7',
    headers: {},
    publishedAt: new Date('2026-12-01T10:00:00.000Z'),
    partition: 1,
    offset: '1796112000000-0',
    group: 'ledger',
    attempt: 1,
    ...overrides,
  };
}

describe('CloudEvents codec', () => {
  it('toCloudEvent maps id, type, source, subject, time, datacontenttype and data; the SDK accepts the result', () => {
    const event = toCloudEvent(message(), { source: 'https://shop.example/orders' });
    expect(event).toEqual({
      specversion: '1.0',
      id: '0190c7e4-5b1e-7c3a-9f00-1a2b3c4d5e6f',
      type: 'order.placed',
      source: 'https://shop.example/orders',
      subject: 'o-7',
      time: '2026-12-01T10:00:00.000Z',
      datacontenttype: 'application/json',
      data: { orderId: 'o-7', total: 12.5 },
    });
    // Strict validation by the reference SDK; its structured-mode HTTP body is the same event.
    const sdk = new CloudEvent(event, true);
    expect(JSON.parse(HTTP.structured(sdk).body as string)).toMatchObject(event);
    expect(toCloudEvent(message({ key: null }), { source: '/x' })).not.toHaveProperty('subject');
  });

  it('headers become extensions; those whose names cannot be extension names travel in eventrailheaders, and come back', () => {
    const headers = {
      traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01',
      tenant: 'acme',
      'x-request-id': 'r-1',
      tenantId: 'T',
      type: 'shadowed',
    };
    const event = toCloudEvent(message({ headers }), { source: '/orders' });
    expect(event).toMatchObject({ traceparent: headers.traceparent, tenant: 'acme', type: 'order.placed' });
    expect(JSON.parse(event.eventrailheaders as string)).toEqual({ 'x-request-id': 'r-1', tenantId: 'T', type: 'shadowed' });
    expect(() => new CloudEvent(event, true)).not.toThrow();
    expect(fromCloudEvent(event).headers).toEqual({
      ...headers,
      'ce-id': '0190c7e4-5b1e-7c3a-9f00-1a2b3c4d5e6f',
      'ce-source': '/orders',
      'ce-time': '2026-12-01T10:00:00.000Z',
    });
  });

  it('fromCloudEvent reads an SDK event: type, data, id, subject as key, extensions as headers, source and time kept', () => {
    const sdk = new CloudEvent({
      type: 'com.example.invoice.paid',
      source: 'urn:billing',
      subject: 'invoice-9',
      time: '2026-11-30T08:15:00Z',
      data: { invoice: 9, cents: 1250 },
      partitionkey: 'ignored-here',
      attempts: 3,
    });
    const input = fromCloudEvent(JSON.parse(HTTP.structured(sdk).body as string));
    expect(input).toEqual({
      event: 'com.example.invoice.paid',
      data: { invoice: 9, cents: 1250 },
      // Unique by source + id, as CloudEvents are; the CloudEvent's own id is kept in ce-id.
      id: cloudEventId('urn:billing', sdk.id),
      key: 'invoice-9',
      headers: {
        'ce-id': sdk.id,
        'ce-source': 'urn:billing',
        'ce-time': '2026-11-30T08:15:00.000Z',
        partitionkey: 'ignored-here',
        attempts: '3',
      },
    });
    // And back: the original source and time, not the handler's.
    const back = toCloudEvent(message({ id: input.id, event: input.event, data: input.data, key: input.key!, headers: input.headers! }), {
      source: '/other',
    });
    expect(back).toMatchObject({
      id: sdk.id,
      source: 'urn:billing',
      time: '2026-11-30T08:15:00.000Z',
      subject: 'invoice-9',
      partitionkey: 'ignored-here',
    });
    expect(back).not.toHaveProperty('eventrailheaders');
  });

  it('accepts the JSON text of an event, text data with its content type, and no data', () => {
    const text = JSON.stringify({ specversion: '1.0', id: '1', source: '/s', type: 't', datacontenttype: 'text/plain', data: 'hello' });
    expect(fromCloudEvent(text)).toMatchObject({ data: 'hello', headers: { 'ce-datacontenttype': 'text/plain' } });
    expect(fromCloudEvent({ specversion: '1.0', id: '1', source: '/s', type: 't' }).data).toBeNull();
    const back = toCloudEvent(message({ data: 'hello', headers: { 'ce-datacontenttype': 'text/plain' } }), { source: '/s' });
    expect(back.datacontenttype).toBe('text/plain');
  });

  it.each([
    [{ id: '1', source: '/s', type: 't' }, 'specversion'],
    [{ specversion: '0.3', id: '1', source: '/s', type: 't' }, 'specversion'],
    [{ specversion: '1.0', source: '/s', type: 't' }, 'id'],
    [{ specversion: '1.0', id: '1', type: 't' }, 'source'],
    [{ specversion: '1.0', id: '1', source: '/s', type: '' }, 'type'],
    [{ specversion: '1.0', id: '1', source: '/s', type: 'a\u0007b' }, 'type'],
    [{ specversion: '1.0', id: '1', source: '/s', type: 't', time: 'yesterday' }, 'time'],
    [{ specversion: '1.0', id: '1', source: '/s', type: 't', data_base64: 'AAEC' }, 'data_base64'],
    [{ specversion: '1.0', id: '1', source: '/s', type: 't', 'X-Custom': 'v' }, 'X-Custom'],
    [{ specversion: '1.0', id: '1', source: '/s', type: 't', nested: { a: 1 } }, 'nested'],
    [{ specversion: '1.0', id: '1', source: '/s', type: 't', eventrailheaders: '[1]' }, 'eventrailheaders'],
    [[], '(event)'],
    ['{not json', '(event)'],
  ])('refuses %j, naming %s', (event, attribute) => {
    expect(() => fromCloudEvent(event)).toThrow(InvalidCloudEventError);
    try {
      fromCloudEvent(event);
    } catch (error) {
      expect((error as InvalidCloudEventError).attribute).toBe(attribute);
    }
  });

  it('toCloudEvent needs a source; the module option defaults to /eventrail/<prefix> and is validated', () => {
    expect(() => toCloudEvent(message(), { source: '' })).toThrow(InvalidCloudEventError);
    expect(resolveModuleOptions({ prefix: 'shop' }).cloudEvents).toEqual({ source: '/eventrail/shop' });
    expect(resolveModuleOptions({ cloudEvents: { source: 'https://shop.example' } }).cloudEvents.source).toBe('https://shop.example');
    expect(() => resolveModuleOptions({ cloudEvents: { source: 'has space' } })).toThrow(/cloudEvents\.source/);
    expect(() => resolveModuleOptions({ cloudEvents: { sourse: '/x' } as never })).toThrow(/did you mean source/);
  });

  it('cloudEventId is a name-based UUID (version 5) of source + id: the same for the same pair, another for any other', () => {
    const seen = new Map<string, string>();
    for (const source of ['urn:a', 'urn:b', '/x', 'urn:a"', '["urn:a"']) {
      for (const id of ['1', '2', 'urn:a', '']) {
        const derived = cloudEventId(source, id);
        expect(derived).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-5[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
        expect(cloudEventId(source, id)).toBe(derived);
        expect(seen.get(derived)).toBeUndefined();
        seen.set(derived, `${source} ${id}`);
      }
    }
  });
});
