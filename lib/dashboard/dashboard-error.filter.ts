import { ArgumentsHost, Catch, ExceptionFilter, HttpStatus } from '@nestjs/common';
import { HttpAdapterHost } from '@nestjs/core';
import { EventrailError } from '../errors/eventrail.error';
import { GroupHasLiveMembersError } from '../errors/group-has-live-members.error';
import { InvalidOptionError } from '../errors/invalid-option.error';
import { RedisUnavailableError } from '../errors/redis-unavailable.error';
import { UnknownGroupError } from '../errors/unknown-group.error';

/** Turns the admin service's typed errors into HTTP answers that name the problem. */
@Catch(EventrailError)
export class DashboardErrorFilter implements ExceptionFilter<EventrailError> {
  constructor(private readonly adapterHost: HttpAdapterHost) {}

  catch(error: EventrailError, host: ArgumentsHost): void {
    const status = statusOf(error);
    const body = { statusCode: status, error: error.name, message: error.message };
    this.adapterHost.httpAdapter.reply(host.switchToHttp().getResponse(), body, status);
  }
}

function statusOf(error: EventrailError): number {
  if (error instanceof InvalidOptionError) return HttpStatus.BAD_REQUEST;
  if (error instanceof UnknownGroupError) return HttpStatus.NOT_FOUND;
  if (error instanceof GroupHasLiveMembersError) return HttpStatus.CONFLICT;
  if (error instanceof RedisUnavailableError) return HttpStatus.SERVICE_UNAVAILABLE;
  return HttpStatus.INTERNAL_SERVER_ERROR;
}
