import type { IncomingHttpHeaders } from 'node:http';

/**
 * Who is calling and from which site, read from what a client cannot choose: the connection's peer
 * address, and the headers a browser sets itself (`Origin`, `Sec-Fetch-Site`, `Host`). What a request
 * says about its own route (`X-Forwarded-*`, `Forwarded`) counts only with `trustProxy`, that is when
 * the peer is a proxy the app trusts to have written them.
 */

/** An Express request, or a Fastify one (which keeps Node's request as `raw`). */
export interface CallerRequest {
  method: string;
  headers: IncomingHttpHeaders;
  socket?: { remoteAddress?: string };
  raw?: { socket?: { remoteAddress?: string } };
}

const FORWARDING_HEADERS = ['forwarded', 'x-forwarded-for', 'x-forwarded-host', 'x-real-ip'] as const;

/** The address of the other end of the TCP connection; `null` when the socket is gone. */
export function peerAddress(request: CallerRequest): string | null {
  return request.socket?.remoteAddress ?? request.raw?.socket?.remoteAddress ?? null;
}

export function isLoopbackAddress(address: string): boolean {
  const ip = address.toLowerCase().replace(/^::ffff:/, '');
  return ip === '::1' || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(ip);
}

/** A host name (with or without port) that only ever means this machine. */
export function isLoopbackHost(host: string): boolean {
  const name = (host.startsWith('[') ? host.slice(0, host.indexOf(']') + 1) : host.replace(/:\d+$/, '')).toLowerCase();
  return name === 'localhost' || name.endsWith('.localhost') || name === '[::1]' || /^127\.\d+\.\d+\.\d+$/.test(name);
}

function first(value: string | string[] | undefined): string | undefined {
  return Array.isArray(value) ? value[0] : value;
}

/** The client as the trusted proxy saw it: the last hop it appended, `X-Forwarded-For` first, then `Forwarded`. */
function forwardedClient(headers: IncomingHttpHeaders): string | null {
  const xff = headers['x-forwarded-for'];
  const chain = (Array.isArray(xff) ? xff.join(',') : (xff ?? '')).split(',').map((hop) => hop.trim());
  const last = chain.filter(Boolean).pop();
  if (last) return last.replace(/^\[|\]$/g, '');
  const forwarded = first(headers.forwarded);
  const hops = forwarded ? [...forwarded.matchAll(/for="?\[?([^\]";,]+)/gi)].map((match) => match[1]) : [];
  return hops.pop() ?? null;
}

/**
 * The host the browser asked for: `Host` (`:authority` on HTTP/2), or with a trusted proxy the first
 * `X-Forwarded-Host`, which that proxy wrote.
 */
export function servedHost(request: CallerRequest, trustProxy: boolean): string | null {
  if (trustProxy) {
    const forwarded = first(request.headers['x-forwarded-host'])?.split(',')[0].trim();
    if (forwarded) return forwarded.toLowerCase();
  }
  const authority = request.headers[':authority'];
  const host = request.headers.host ?? (typeof authority === 'string' ? authority : undefined);
  return host ? host.toLowerCase() : null;
}

/**
 * Why this request is not from this machine, or `null` when it is: a loopback peer (or, behind a trusted
 * proxy, a loopback client), no unvouched-for forwarding headers, and addressed to a loopback name, so
 * that a page elsewhere which rebinds its own name to 127.0.0.1 gets no answer either.
 */
export function notLocalReason(request: CallerRequest, trustProxy: boolean): string | null {
  const peer = peerAddress(request);
  if (peer === null || !isLoopbackAddress(peer)) return `the connection comes from ${peer ?? 'an unknown address'}`;
  if (trustProxy) {
    const client = forwardedClient(request.headers);
    if (client !== null && !isLoopbackAddress(client)) return `the proxy forwards a request from ${client}`;
  } else if (FORWARDING_HEADERS.some((name) => request.headers[name] !== undefined)) {
    return 'it came through a proxy (forwarding headers, and trustProxy is off)';
  }
  const host = servedHost(request, trustProxy);
  if (host === null || !isLoopbackHost(host)) return `it is addressed to ${host ?? 'no host'}, not to localhost`;
  return null;
}

function hostOf(origin: string): string | null {
  try {
    return new URL(origin).host.toLowerCase();
  } catch {
    return null; // "null" (a sandboxed frame, a file) and anything unparsable: no site of ours
  }
}

/**
 * Why this request comes from a page of another site, or `null` when it does not: its `Origin` is listed,
 * or it is this page's own origin and the browser does not call it cross-site. A browser without
 * `Sec-Fetch-Site` still sends `Origin` on every cross-origin call.
 */
export function crossSiteReason(request: CallerRequest, origins: ReadonlySet<string>, trustProxy: boolean): string | null {
  const origin = first(request.headers.origin);
  if (origin !== undefined && origins.has(origin)) return null;
  const site = first(request.headers['sec-fetch-site']);
  if (site === 'cross-site' || site === 'same-site') return `the browser calls it ${site}${origin ? ` from ${origin}` : ''}`;
  if (origin === undefined) return null;
  const own = hostOf(origin);
  // Both sides must name a host: an unparsable origin and a missing Host are not "the same".
  if (!own || own !== servedHost(request, trustProxy)) return `origin ${origin} is not listed in cors.origins`;
  return null;
}
