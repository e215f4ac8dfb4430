import { CanActivate, ExecutionContext, Injectable, ServiceUnavailableException } from '@nestjs/common';
import { Reflector } from '@nestjs/core';
import { EventrailAdmin } from '../admin/eventrail-admin';
import { DASHBOARD_PUBLIC } from './dashboard.constants';

/**
 * Answers 503 at once while the connection to Redis is down, instead of
 * letting the admin call wait in the client's retry queue: the UI then shows
 * the outage on its next refresh. Public routes (config, preflights) need no Redis.
 */
@Injectable()
export class DashboardRedisGuard implements CanActivate {
  constructor(
    private readonly admin: EventrailAdmin,
    private readonly reflector: Reflector,
  ) {}

  canActivate(context: ExecutionContext): boolean {
    if (this.reflector.get<boolean>(DASHBOARD_PUBLIC, context.getHandler())) return true;
    const status = this.admin.connectionStatus();
    if (status !== 'ready') throw new ServiceUnavailableException(`Redis is unavailable (connection ${status})`);
    return true;
  }
}
