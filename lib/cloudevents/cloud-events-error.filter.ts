import { ArgumentsHost, Catch, ExceptionFilter, HttpException, HttpStatus, Logger } from '@nestjs/common';
import { HttpAdapterHost } from '@nestjs/core';
import { EventrailError } from '../errors/eventrail.error';
import { PayloadTooLargeError } from '../errors/payload-too-large.error';
import { RedisUnavailableError } from '../errors/redis-unavailable.error';
import { ReplicationTimeoutError } from '../errors/replication-timeout.error';
import { describeError } from '../util/describe-error';
import { CloudEventsBodyUnreadError } from './errors/cloud-events-body-unread.error';
import { UnsupportedCloudEventsBodyError } from './errors/unsupported-cloud-events-body.error';

/**
 * Failures of the ingress as `{ statusCode, error, message }`: a CloudEvent or
 * publish the library refused as 400 (the sender's to fix, no retry helps),
 * too large as 413, Redis away as 503 (retry later), anything else 500.
 */
@Catch()
export class CloudEventsErrorFilter implements ExceptionFilter {
  private readonly logger = new Logger(CloudEventsErrorFilter.name);

  constructor(private readonly adapterHost: HttpAdapterHost) {}

  catch(error: unknown, host: ArgumentsHost): void {
    const [statusCode, name, message] = this.describe(error);
    this.adapterHost.httpAdapter.reply(host.switchToHttp().getResponse(), { statusCode, error: name, message }, statusCode);
  }

  private describe(error: unknown): [number, string, string] {
    if (error instanceof HttpException) {
      const response = error.getResponse();
      const message = typeof response === 'string' ? response : String((response as { message?: unknown }).message ?? error.message);
      return [error.getStatus(), error.name, message];
    }
    if (error instanceof RedisUnavailableError || error instanceof ReplicationTimeoutError) {
      return [HttpStatus.SERVICE_UNAVAILABLE, error.name, error.message];
    }
    if (error instanceof PayloadTooLargeError) return [HttpStatus.PAYLOAD_TOO_LARGE, error.name, error.message];
    if (error instanceof UnsupportedCloudEventsBodyError) return [HttpStatus.UNSUPPORTED_MEDIA_TYPE, error.name, error.message];
    if (error instanceof CloudEventsBodyUnreadError) {
      this.logger.error(error.message);
      return [HttpStatus.INTERNAL_SERVER_ERROR, error.name, error.message];
    }
    if (error instanceof EventrailError) return [HttpStatus.BAD_REQUEST, error.name, error.message];
    this.logger.error(`CloudEvents ingress failed: ${describeError(error)}`);
    return [HttpStatus.INTERNAL_SERVER_ERROR, 'InternalServerError', 'Internal server error'];
  }
}
