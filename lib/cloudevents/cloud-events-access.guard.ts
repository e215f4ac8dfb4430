import { CanActivate, ExecutionContext, ForbiddenException, Inject, Injectable } from '@nestjs/common';
import { HttpAdapterHost } from '@nestjs/core';
import { CallerRequest, crossSiteReason, notLocalReason } from '../dashboard/dashboard-caller';
import { CLOUD_EVENTS_OPTIONS } from './cloud-events.constants';
import type { ResolvedCloudEventsOptions } from './cloud-events-ingress.options';
import { BearerToken } from '../util/bearer-token';

const NO_SITES: ReadonlySet<string> = new Set();

/**
 * The dashboard's rules (`dashboard/dashboard-caller.ts`), for a front end that
 * can only write: no page of another site (no CORS origins at all: senders
 * are servers, not browsers); without a configured token, this machine only,
 * whatever the request's headers claim; with one, the bearer token.
 */
@Injectable()
export class CloudEventsAccessGuard implements CanActivate {
  private readonly token: BearerToken | null;

  constructor(
    private readonly adapterHost: HttpAdapterHost,
    @Inject(CLOUD_EVENTS_OPTIONS) private readonly options: ResolvedCloudEventsOptions,
  ) {
    this.token = BearerToken.of(options.token);
  }

  canActivate(context: ExecutionContext): boolean {
    const http = context.switchToHttp();
    const request = http.getRequest<CallerRequest>();
    const crossSite = crossSiteReason(request, NO_SITES, this.options.trustProxy);
    if (crossSite !== null) throw new ForbiddenException(`The eventrail CloudEvents ingress accepts nothing from web pages: ${crossSite}`);
    if (this.token === null) {
      const reason = notLocalReason(request, this.options.trustProxy);
      if (reason === null) return true;
      throw new ForbiddenException(
        `This CloudEvents ingress has no auth.token, so it accepts events only from this machine (${reason}); set auth.token to accept them from elsewhere`,
      );
    }
    this.token.verify(request.headers.authorization, (name, value) =>
      this.adapterHost.httpAdapter.setHeader(http.getResponse(), name, value),
    );
    return true;
  }
}
