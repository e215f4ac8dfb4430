import {
  CanActivate,
  ExecutionContext,
  ForbiddenException,
  Inject,
  Injectable,
  UnauthorizedException,
  UnsupportedMediaTypeException,
} from '@nestjs/common';
import { HttpAdapterHost, Reflector } from '@nestjs/core';
import { createHash, timingSafeEqual } from 'node:crypto';
import type { IncomingHttpHeaders } from 'node:http';
import { DASHBOARD_OPTIONS, DASHBOARD_PUBLIC, DASHBOARD_WRITE } from './dashboard.constants';
import type { ResolvedDashboardOptions } from './dashboard.options';

interface HttpRequest {
  method: string;
  headers: IncomingHttpHeaders;
}

const BEARER = /^Bearer\s+(\S+)\s*$/i;

/**
 * Every API call passes here, on Express and Fastify alike: CORS headers for
 * the listed origins (set first, so even a refusal is readable by them), then
 * the bearer token, then the read-only switch for writes.
 */
@Injectable()
export class DashboardAccessGuard implements CanActivate {
  private readonly tokenDigest: Buffer | null;

  constructor(
    @Inject(DASHBOARD_OPTIONS) private readonly options: ResolvedDashboardOptions,
    private readonly adapterHost: HttpAdapterHost,
    private readonly reflector: Reflector,
  ) {
    this.tokenDigest = options.token === null ? null : digest(options.token);
  }

  canActivate(context: ExecutionContext): boolean {
    const http = context.switchToHttp();
    const request = http.getRequest<HttpRequest>();
    const response: unknown = http.getResponse();
    const handler = context.getHandler();
    this.applyCors(request, response);
    if (this.reflector.get<boolean>(DASHBOARD_PUBLIC, handler)) return true;
    this.authenticate(request, response);
    if (this.reflector.get<boolean>(DASHBOARD_WRITE, handler)) this.checkWrite(request);
    return true;
  }

  private applyCors(request: HttpRequest, response: unknown): void {
    const origin = request.headers.origin;
    const preflight = request.method === 'OPTIONS';
    if (!origin || !this.options.origins.has(origin)) {
      // Same-origin calls never send a preflight: one from elsewhere is a site that is not listed.
      if (preflight) throw new ForbiddenException(`Origin ${origin ?? '(none)'} may not call the eventrail dashboard API`);
      return;
    }
    const adapter = this.adapterHost.httpAdapter;
    adapter.setHeader(response, 'Access-Control-Allow-Origin', origin);
    adapter.setHeader(response, 'Vary', 'Origin');
    if (preflight) {
      adapter.setHeader(response, 'Access-Control-Allow-Methods', 'GET, POST, DELETE');
      adapter.setHeader(response, 'Access-Control-Allow-Headers', 'Authorization, Content-Type');
      adapter.setHeader(response, 'Access-Control-Max-Age', '600');
    }
  }

  private authenticate(request: HttpRequest, response: unknown): void {
    if (this.tokenDigest === null) {
      // No token: only a browser on this machine. A page elsewhere that rebinds its own name to this
      // address still sends that name as Host, so it gets no answer.
      const host = requestHost(request);
      if (host !== null && isLoopback(host)) return;
      throw new UnauthorizedException(
        `This dashboard has no auth.token, so its API only answers requests to localhost; set auth.token to reach it as ${host ?? 'this host'}`,
      );
    }
    const header = request.headers.authorization;
    const presented = header ? BEARER.exec(header)?.[1] : undefined;
    // Hashing first gives both sides the same length, so the comparison time says nothing about the token.
    if (presented !== undefined && timingSafeEqual(digest(presented), this.tokenDigest)) return;
    this.adapterHost.httpAdapter.setHeader(response, 'WWW-Authenticate', 'Bearer realm="eventrail"');
    throw new UnauthorizedException(header ? 'Invalid bearer token' : 'Missing bearer token: send Authorization: Bearer <token>');
  }

  private checkWrite(request: HttpRequest): void {
    if (this.options.readOnly) throw new ForbiddenException('The eventrail dashboard is read-only');
    const origin = request.headers.origin;
    // A write from a page of another, unlisted site (a form post needs no preflight) is refused.
    if (origin && !this.options.origins.has(origin) && !servedHosts(request).includes(hostOf(origin))) {
      throw new ForbiddenException(`Origin ${origin} may not change data through the eventrail dashboard`);
    }
    const type = request.headers['content-type'];
    if (request.method === 'POST' && !(type && /^application\/json\b/i.test(type))) {
      throw new UnsupportedMediaTypeException('Send the request body as application/json');
    }
  }
}

function digest(value: string): Buffer {
  return createHash('sha256').update(value).digest();
}

/** The host the request was addressed to: `Host`, or `:authority` on HTTP/2. */
function requestHost({ headers }: HttpRequest): string | null {
  const authority = headers[':authority'];
  return headers.host ?? (typeof authority === 'string' ? authority : null);
}

/** The host the browser asked for: the request's, or what a reverse proxy says it was (`X-Forwarded-Host`). */
function servedHosts(request: HttpRequest): Array<string | null> {
  const forwarded = request.headers['x-forwarded-host'];
  const first = (Array.isArray(forwarded) ? forwarded[0] : forwarded)?.split(',')[0].trim();
  return [requestHost(request), first ?? null].filter((host) => host !== null);
}

function isLoopback(host: string): boolean {
  const name = host.startsWith('[') ? host.slice(0, host.indexOf(']') + 1) : host.replace(/:\d+$/, '');
  return name === 'localhost' || name.endsWith('.localhost') || name === '[::1]' || /^127\.\d+\.\d+\.\d+$/.test(name);
}

function hostOf(origin: string): string | null {
  try {
    return new URL(origin).host;
  } catch {
    return null;
  }
}
