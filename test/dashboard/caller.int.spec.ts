import type { IncomingHttpHeaders } from 'node:http';
import { CallerRequest, crossSiteReason, isLoopbackAddress, notLocalReason } from '../../lib/dashboard/dashboard-caller';
import { seededRandom as generator } from '../support/seeded-random';

// The two decisions of the access guard, for many generated requests: nothing a client writes in its
// headers makes another machine local, or another site ours. (The same rules against real connections,
// another machine included, are in dashboard-access.spec.ts.)

const HOSTS = [
  'localhost',
  'localhost:3000',
  '127.0.0.1',
  '127.0.0.1:3000',
  '[::1]',
  '[::1]:3000',
  'app.localhost',
  'LOCALHOST',
  '10.0.0.5',
  'evil.example',
  '127.0.0.1.evil.example',
  '',
];
const FORWARDING: Array<[string, string[]]> = [
  ['x-forwarded-for', ['127.0.0.1', '::1', '127.0.0.1, 127.0.0.1', '203.0.113.9', '', 'unknown']],
  ['x-forwarded-host', ['localhost', '127.0.0.1:3000', 'evil.example']],
  ['forwarded', ['for=127.0.0.1', 'for="[::1]";host=localhost', 'for=203.0.113.9', 'by=127.0.0.1']],
  ['x-real-ip', ['127.0.0.1', '203.0.113.9']],
];
const ORIGINS = [
  'https://evil.example',
  'http://localhost:3000',
  'http://127.0.0.1:3000',
  'null',
  'http://LOCALHOST:3000',
  'http://localhost:3001',
  'file://',
  'garbage',
];
const SITES = ['cross-site', 'same-site', 'same-origin', 'none', undefined];

function pick<T>(random: () => number, items: readonly T[]): T {
  return items[Math.floor(random() * items.length)];
}

function randomHeaders(random: () => number, forwarding: boolean): IncomingHttpHeaders {
  const headers: IncomingHttpHeaders = {};
  const host = pick(random, HOSTS);
  if (host) headers.host = host;
  if (random() < 0.3) headers.origin = pick(random, ORIGINS);
  const site = pick(random, SITES);
  if (site) headers['sec-fetch-site'] = site;
  if (forwarding) {
    for (const [name, values] of FORWARDING) if (random() < 0.5) headers[name] = pick(random, values);
    if (!FORWARDING.some(([name]) => headers[name] !== undefined)) headers['x-forwarded-for'] = pick(random, FORWARDING[0][1]);
  }
  return headers;
}

const request = (remoteAddress: string | undefined, headers: IncomingHttpHeaders, fastify = false): CallerRequest =>
  fastify ? { method: 'GET', headers, raw: { socket: { remoteAddress } } } : { method: 'GET', headers, socket: { remoteAddress } };

describe('who is calling the dashboard', () => {
  it('a peer that is not loopback is never local, whatever its headers and trustProxy say (2000 generated requests)', () => {
    const random = generator(20261201);
    const peers = ['10.200.1.2', '192.0.2.44', '::ffff:10.0.0.1', 'fe80::1', '2001:db8::7', '128.0.0.1', '::2', undefined];
    for (let n = 0; n < 2000; n += 1) {
      const peer = pick(random, peers);
      const headers = randomHeaders(random, random() < 0.5);
      const trustProxy = random() < 0.5;
      expect([peer, headers, trustProxy, notLocalReason(request(peer, headers, random() < 0.5), trustProxy)]).toEqual([
        peer,
        headers,
        trustProxy,
        expect.any(String),
      ]);
    }
  });

  it('a loopback peer with forwarding headers is not local without trustProxy (2000 generated requests)', () => {
    const random = generator(7);
    for (let n = 0; n < 2000; n += 1) {
      const peer = pick(random, ['127.0.0.1', '::1', '::ffff:127.0.0.1', '127.8.9.10']);
      const headers = randomHeaders(random, true);
      expect([headers, notLocalReason(request(peer, headers), false)]).toEqual([headers, expect.stringMatching(/through a proxy/)]);
    }
  });

  it('a loopback peer without forwarding headers is local exactly when addressed to a loopback name', () => {
    const local = ['localhost', 'localhost:3000', '127.0.0.1', '127.0.0.1:3000', '[::1]', '[::1]:3000', 'app.localhost', 'LOCALHOST'];
    for (const host of HOSTS) {
      const reason = notLocalReason(request('::ffff:127.0.0.1', host ? { host } : {}), false);
      expect([host, reason === null]).toEqual([host, local.includes(host)]);
    }
    expect(['127.0.0.1', '::1', '::ffff:127.0.0.1', '127.255.0.1'].every(isLoopbackAddress)).toBe(true);
    expect(['10.0.0.1', '::', '0.0.0.0', '::ffff:10.0.0.1', '1127.0.0.1'].some(isLoopbackAddress)).toBe(false);
  });

  it('an Origin that is neither listed nor this host, or a cross-site fetch, is never our site (3000 generated requests)', () => {
    const random = generator(42);
    const listed = new Set(['https://ops.example.com']);
    for (let n = 0; n < 3000; n += 1) {
      const headers = randomHeaders(random, random() < 0.3);
      if (random() < 0.1) headers.origin = 'https://ops.example.com';
      const trustProxy = random() < 0.5;
      const reason = crossSiteReason(request('127.0.0.1', headers), listed, trustProxy);
      const origin = headers.origin;
      const site = headers['sec-fetch-site'];
      const served = ((trustProxy && headers['x-forwarded-host']) || headers.host) as string | undefined;
      const own = origin !== undefined && URL.canParse(origin) && new URL(origin).host === served?.toLowerCase();
      const expectedOurs =
        (origin !== undefined && listed.has(origin)) || (site !== 'cross-site' && site !== 'same-site' && (origin === undefined || own));
      expect([headers, trustProxy, reason === null]).toEqual([headers, trustProxy, expectedOurs]);
    }
  });
});
