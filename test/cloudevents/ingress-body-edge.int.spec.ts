import { gzipSync, deflateSync } from 'node:zlib';
import { binaryHeaders, Ingress, type Platform } from './ingress-harness';

describe.each(['express', 'fastify'] as Platform[])('CloudEvents ingress bodies, (%s)', (platform) => {
  const ingress = new Ingress(platform);
  afterEach(() => ingress.close());
  afterAll(() => ingress.quit());

  // Promise: "the ingress reads every request itself, as sent ... the same limit on Express and Fastify, whatever the
  // app's own body parsers allow". Express routes /cloudevents/ and /CloudEvents to the ingress (non-strict,
  // case-insensitive routing), but the body reader only matches the exact path.
  it.each(['/cloudevents/', '/CloudEvents', '/cloud%65vents'])(
    'a request to %s that reaches the ingress is read by the ingress',
    async (path) => {
      await ingress.boot({ maxPayloadBytes: 1_000_000 });
      const scalar = await ingress.request(binaryHeaders('scalar', { 'content-type': 'application/json' }), '"x"', { path });
      const object = await ingress.request(binaryHeaders('object', { 'content-type': 'application/json' }), '{"order":7}', { path });
      const big = await ingress.request(binaryHeaders('big', { 'content-type': 'application/json' }), JSON.stringify('b'.repeat(200_000)), {
        path,
      });
      const reached = [scalar, object, big].filter((r) => r.status !== 404);
      const stored = await ingress.entries();
      // Either the path is not the ingress's (404 for all), or it behaves as the ingress: 202 and the data as sent.
      if (reached.length > 0) {
        const byId = new Map(stored.map((e) => [e.ceId, e.data]));
        expect({
          path,
          statuses: [scalar.status, object.status, big.status],
          big: big.json,
          scalar: byId.get('scalar'),
          object: byId.get('object'),
        }).toEqual({
          path,
          statuses: [202, 202, 202],
          big: expect.objectContaining({ accepted: expect.any(Array) }),
          scalar: 'x',
          object: { order: 7 },
        });
      } else {
        expect(stored).toEqual([]);
      }
    },
  );

  // Promise: "the body as sent". A Content-Encoding the ingress does not decode must not be stored as the data.
  it.each([
    ['gzip', gzipSync],
    ['deflate', deflateSync],
  ] as const)('a %s-encoded body is decoded or refused, never stored as its compressed bytes', async (encoding, encode) => {
    await ingress.boot();
    const text = 'hello, compressed world';
    const reply = await ingress.request(
      binaryHeaders(`enc-${encoding}`, { 'content-type': 'text/plain', 'content-encoding': encoding }),
      encode(text),
    );
    const stored = await ingress.entries();
    if (reply.status === 202) expect(stored.map((e) => e.data)).toEqual([text]);
    else expect({ status: reply.status, stored }).toEqual({ status: 415, stored: [] });
  });

  // Promise: "other data (text, application/x-www-form-urlencoded) is stored as the text that was sent". Bytes that are
  // not UTF-8 cannot be stored as that text: they must be refused, not replaced by U+FFFD with a 202.
  it.each([
    ['text/plain; charset=iso-8859-1', Buffer.from('café', 'latin1')],
    ['application/x-www-form-urlencoded', Buffer.from([0x6e, 0x61, 0x6d, 0x65, 0x3d, 0xe9])],
    ['text/plain', Buffer.from([0x61, 0xff, 0xfe, 0x62])],
    ['application/octet-stream', Buffer.from([0x00, 0x80, 0xff, 0x41])],
  ])('data of type %s that is not UTF-8 is stored byte for byte or refused', async (type, bytes) => {
    await ingress.boot();
    const reply = await ingress.request(binaryHeaders('bytes', { 'content-type': type }), bytes);
    const stored = await ingress.entries();
    if (reply.status === 202) {
      expect({ type, sent: bytes.toString('hex'), stored: Buffer.from(String(stored[0]?.data), 'utf8').toString('hex') }).toEqual({
        type,
        sent: bytes.toString('hex'),
        stored: bytes.toString('hex'),
      });
    } else {
      expect({ type, status: reply.status, stored }).toEqual({ type, status: expect.any(Number), stored: [] });
      expect([400, 415]).toContain(reply.status);
    }
  });

  // The docs: attribute headers cannot be set through eventrailheaders. type, specversion and subject are
  // CloudEvents attributes too.
  it.each(['ce-type', 'ce-specversion', 'ce-subject', 'CE-Type'])('eventrailheaders carrying %s is refused', async (name) => {
    await ingress.boot();
    const packed = JSON.stringify({ [name]: 'forged' });
    const reply = await ingress.request(
      binaryHeaders('smuggle', { 'ce-eventrailheaders': encodeURIComponent(packed), 'content-type': 'application/json' }),
      '{}',
    );
    expect({ name, status: reply.status, error: reply.json?.error, stored: (await ingress.entries()).map((e) => e.headers) }).toEqual({
      name,
      status: 400,
      error: 'InvalidCloudEventError',
      stored: [],
    });
  });
});
