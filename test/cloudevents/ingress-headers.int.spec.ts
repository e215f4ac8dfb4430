import { binaryHeaders, Ingress, type Platform } from './ingress-harness';

describe.each(['express', 'fastify'] as Platform[])('binary-mode headers (%s)', (platform) => {
  const ingress = new Ingress(platform);
  afterEach(() => ingress.close());
  afterAll(() => ingress.quit());

  // A CloudEvent has one id and one source. Node joins a repeated header with ", ", and the ingress takes the joined
  // text as the attribute: two senders' (or a proxy's and a sender's) ids become one event "a, b".
  it.each(['ce-id', 'ce-source', 'ce-subject', 'ce-time'])('a repeated %s header is refused, not joined', async (name) => {
    await ingress.boot();
    const values: Record<string, string[]> = {
      'ce-id': ['first', 'second'],
      'ce-source': ['urn:a', 'urn:b'],
      'ce-subject': ['k1', 'k2'],
      'ce-time': ['2026-01-01T00:00:00Z', '2026-01-02T00:00:00Z'],
    };
    const reply = await ingress.request(binaryHeaders('rep', { [name]: values[name], 'content-type': 'application/json' }), '1');
    expect({ name, status: reply.status, stored: (await ingress.entries()).map((e) => e.headers) }).toEqual({
      name,
      status: 400,
      stored: [],
    });
  });

  // The binding: without Content-Type, data is JSON (datacontenttype defaults to application/json). Docs: "the same
  // ... on Express and Fastify". Express stores the JSON value; Fastify answers 415.
  it('binary mode without Content-Type is taken as JSON data', async () => {
    await ingress.boot();
    const reply = await ingress.request(binaryHeaders('no-type'), '{"x":1}');
    expect({ status: reply.status, data: (await ingress.entries()).map((e) => e.data) }).toEqual({ status: 202, data: [{ x: 1 }] });
  });
});
