import { ArgumentsHost, Catch, ExceptionFilter, HttpException, HttpStatus, Logger } from '@nestjs/common';
import { HttpAdapterHost } from '@nestjs/core';
import { EventrailAdmin } from '../admin/eventrail-admin';
import { EventrailError } from '../errors/eventrail.error';
import { GroupHasLiveMembersError } from '../errors/group-has-live-members.error';
import { InvalidDeadLetterError } from '../errors/invalid-dead-letter.error';
import { InvalidOptionError } from '../errors/invalid-option.error';
import { RedisFullError } from '../errors/redis-full.error';
import { RedisUnavailableError } from '../errors/redis-unavailable.error';
import { UnknownGroupError } from '../errors/unknown-group.error';
import { describeError } from '../util/describe-error';

interface ErrorBody {
  statusCode: number;
  error: string;
  message: string;
}

/**
 * Every failure of the dashboard API as `{ statusCode, error, message }`: the
 * admin service's typed errors as the 4xx they stand for, and a failure while
 * Redis is unreachable, or a write a full Redis refused, as 503, so the UI can
 * tell an outage from a bug.
 */
@Catch()
export class DashboardErrorFilter implements ExceptionFilter {
  private readonly logger = new Logger(DashboardErrorFilter.name);

  constructor(
    private readonly adapterHost: HttpAdapterHost,
    private readonly admin: EventrailAdmin,
  ) {}

  catch(error: unknown, host: ArgumentsHost): void {
    const body = this.bodyFor(error);
    this.adapterHost.httpAdapter.reply(host.switchToHttp().getResponse(), body, body.statusCode);
  }

  private bodyFor(error: unknown): ErrorBody {
    if (error instanceof HttpException) {
      const response = error.getResponse();
      const message = typeof response === 'string' ? response : String((response as { message?: unknown }).message ?? error.message);
      const status = error.getStatus();
      return { statusCode: status, error: status === HttpStatus.SERVICE_UNAVAILABLE ? 'RedisUnavailable' : error.name, message };
    }
    if (error instanceof EventrailError && !(error instanceof RedisUnavailableError)) {
      return { statusCode: statusOf(error), error: error.name, message: error.message };
    }
    const status = this.admin.connectionStatus();
    if (error instanceof RedisUnavailableError || status !== 'ready') {
      const reason = describeError(error);
      return {
        statusCode: HttpStatus.SERVICE_UNAVAILABLE,
        error: 'RedisUnavailable',
        message: `Redis is unavailable (${status}): ${reason}`,
      };
    }
    this.logger.error(`Dashboard API failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`);
    return { statusCode: HttpStatus.INTERNAL_SERVER_ERROR, error: 'InternalServerError', message: 'Internal server error' };
  }
}

function statusOf(error: EventrailError): number {
  if (error instanceof InvalidOptionError) return HttpStatus.BAD_REQUEST;
  if (error instanceof UnknownGroupError) return HttpStatus.NOT_FOUND;
  if (error instanceof GroupHasLiveMembersError) return HttpStatus.CONFLICT;
  // A stored letter eventrail cannot read back: no retry helps until it is deleted.
  if (error instanceof InvalidDeadLetterError) return HttpStatus.UNPROCESSABLE_ENTITY;
  // Redis is there but over maxmemory: the write can succeed once memory is freed (the message says how).
  if (error instanceof RedisFullError) return HttpStatus.SERVICE_UNAVAILABLE;
  return HttpStatus.INTERNAL_SERVER_ERROR;
}
