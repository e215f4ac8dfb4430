import { CanActivate, ExecutionContext, ForbiddenException, Inject, Injectable, UnauthorizedException } from '@nestjs/common';
import { HttpAdapterHost } from '@nestjs/core';
import { createHash, timingSafeEqual } from 'node:crypto';
import { CallerRequest, crossSiteReason, notLocalReason } from '../dashboard/dashboard-caller';
import { CLOUD_EVENTS_OPTIONS } from './cloud-events.constants';
import type { ResolvedCloudEventsOptions } from './cloud-events-ingress.options';

const BEARER = /^Bearer\s+(\S+)\s*$/i;
const NO_SITES: ReadonlySet<string> = new Set();

/**
 * The dashboard's rules (`dashboard/dashboard-caller.ts`), for a front end that
 * can only write: no page of another site (no CORS origins at all: senders
 * are servers, not browsers); without a configured token, this machine only,
 * whatever the request's headers claim; with one, the bearer token.
 */
@Injectable()
export class CloudEventsAccessGuard implements CanActivate {
  private readonly tokenDigest: Buffer | null;

  constructor(
    @Inject(CLOUD_EVENTS_OPTIONS) private readonly options: ResolvedCloudEventsOptions,
    private readonly adapterHost: HttpAdapterHost,
  ) {
    this.tokenDigest = options.token === null ? null : digest(options.token);
  }

  canActivate(context: ExecutionContext): boolean {
    const http = context.switchToHttp();
    const request = http.getRequest<CallerRequest>();
    const crossSite = crossSiteReason(request, NO_SITES, this.options.trustProxy);
    if (crossSite !== null) throw new ForbiddenException(`The eventrail CloudEvents ingress accepts nothing from web pages: ${crossSite}`);
    if (this.tokenDigest === null) {
      const reason = notLocalReason(request, this.options.trustProxy);
      if (reason === null) return true;
      throw new ForbiddenException(
        `This CloudEvents ingress has no auth.token, so it accepts events only from this machine (${reason}); set auth.token to accept them from elsewhere`,
      );
    }
    const header = request.headers.authorization;
    const presented = header ? BEARER.exec(header)?.[1] : undefined;
    if (presented !== undefined && timingSafeEqual(digest(presented), this.tokenDigest)) return true;
    this.adapterHost.httpAdapter.setHeader(http.getResponse(), 'WWW-Authenticate', 'Bearer realm="eventrail"');
    throw new UnauthorizedException(header ? 'Invalid bearer token' : 'Missing bearer token: send Authorization: Bearer <token>');
  }
}

function digest(value: string): Buffer {
  return createHash('sha256').update(value).digest();
}
