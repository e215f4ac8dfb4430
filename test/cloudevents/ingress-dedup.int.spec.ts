import { binaryHeaders, Ingress, type Platform } from './ingress-harness';

const STRUCTURED = { 'content-type': 'application/cloudevents+json' };

describe.each(['express', 'fastify'] as Platform[])('CloudEvents ingress dedup (%s)', (platform) => {
  const ingress = new Ingress(platform, 8);
  afterEach(() => ingress.close());
  afterAll(() => ingress.quit());

  // The dedup mark lives in the partition's hash slot (so the append script can check it on Redis Cluster), and the
  // partition comes from the subject: dedup holds for one source + id + subject, as the docs say.
  it('a retry with the same source, id and subject appends once, also with new content; another subject appends again', async () => {
    await ingress.boot();
    const send = (subject: string | undefined, data: unknown) =>
      ingress.request(
        STRUCTURED,
        JSON.stringify({ specversion: '1.0', id: 'once', source: 'urn:test', type: 'test.sent', ...(subject ? { subject } : {}), data }),
      );
    const replies = [
      await send('order-1', { v: 1 }),
      await send('order-1', { v: 1 }),
      await send('order-1', { v: 2 }),
      await send(undefined, { v: 3 }),
    ];
    const stored = await ingress.entries();
    expect({
      statuses: replies.map((r) => r.status),
      duplicates: replies.map((r) => r.json?.accepted?.[0]?.duplicate),
      data: stored.map((e) => e.data).sort((a, b) => (a as { v: number }).v - (b as { v: number }).v),
    }).toEqual({ statuses: [202, 202, 202, 202], duplicates: [false, true, true, false], data: [{ v: 1 }, { v: 3 }] });
  });

  it('binary mode: the same ce-source, ce-id and ce-subject appends once', async () => {
    await ingress.boot();
    for (let i = 0; i < 5; i++)
      expect(
        (await ingress.request(binaryHeaders('bin-once', { 'ce-subject': 'a', 'content-type': 'application/json' }), String(i))).status,
      ).toBe(202);
    expect((await ingress.entries()).map((e) => e.data)).toEqual([0]);
  });
});
