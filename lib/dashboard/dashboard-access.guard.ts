import { CanActivate, ExecutionContext, ForbiddenException, Inject, Injectable, UnsupportedMediaTypeException } from '@nestjs/common';
import { HttpAdapterHost, Reflector } from '@nestjs/core';
import { CallerRequest, crossSiteReason, notLocalReason } from './dashboard-caller';
import { DASHBOARD_OPTIONS, DASHBOARD_PUBLIC, DASHBOARD_WRITE } from './dashboard.constants';
import type { ResolvedDashboardOptions } from './dashboard.options';
import { BearerToken } from '../util/bearer-token';

/**
 * Every API call passes here, on Express and Fastify alike, in this order: CORS headers for the listed
 * origins (set first, so even a refusal is readable by them; preflights stop there), then the refusal of
 * other sites, then, without a configured token, of other machines, then the bearer token, then the
 * read-only switch for writes. The site and machine checks do not depend on CORS headers: an app that
 * installed a permissive `app.enableCors()` lets any page read what we answer, so what a page of
 * another site gets is a refusal.
 */
@Injectable()
export class DashboardAccessGuard implements CanActivate {
  private readonly token: BearerToken | null;

  constructor(
    @Inject(DASHBOARD_OPTIONS) private readonly options: ResolvedDashboardOptions,
    private readonly adapterHost: HttpAdapterHost,
    private readonly reflector: Reflector,
  ) {
    this.token = BearerToken.of(options.token);
  }

  canActivate(context: ExecutionContext): boolean {
    const http = context.switchToHttp();
    const request = http.getRequest<CallerRequest>();
    const response: unknown = http.getResponse();
    const handler = context.getHandler();
    this.applyCors(request, response);
    if (request.method === 'OPTIONS') return true;
    const crossSite = crossSiteReason(request, this.options.origins, this.options.trustProxy);
    if (crossSite !== null) throw new ForbiddenException(`The eventrail dashboard API answers no other site: ${crossSite}`);
    if (this.options.tokenSource !== 'configured') this.checkLocal(request);
    if (this.reflector.get<boolean>(DASHBOARD_PUBLIC, handler)) return true;
    this.authenticate(request, response);
    if (this.reflector.get<boolean>(DASHBOARD_WRITE, handler)) this.checkWrite(request);
    return true;
  }

  private applyCors(request: CallerRequest, response: unknown): void {
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

  /** Without a configured token (generated, or `auth: false`) the API is this machine's only. */
  private checkLocal(request: CallerRequest): void {
    const reason = notLocalReason(request, this.options.trustProxy);
    if (reason === null) return;
    throw new ForbiddenException(
      `This dashboard has no configured auth.token, so its API answers only this machine (${reason}); ` +
        'set auth.token to reach it from elsewhere',
    );
  }

  private authenticate(request: CallerRequest, response: unknown): void {
    if (this.token === null) return; // auth: false, and checkLocal passed
    this.token.verify(request.headers.authorization, (name, value) => this.adapterHost.httpAdapter.setHeader(response, name, value));
  }

  private checkWrite(request: CallerRequest): void {
    if (this.options.readOnly) throw new ForbiddenException('The eventrail dashboard is read-only');
    // A plain form cannot send JSON, so a write needs a preflight that another site does not pass.
    const type = request.headers['content-type'];
    if (request.method === 'POST' && !(type && /^application\/json\b/i.test(type))) {
      throw new UnsupportedMediaTypeException('Send the request body as application/json');
    }
  }
}
