import {
  BadRequestException,
  Headers,
  HttpCode,
  Inject,
  Injectable,
  Options,
  Post,
  Req,
  Res,
  UnsupportedMediaTypeException,
} from '@nestjs/common';
import { HttpAdapterHost } from '@nestjs/core';
import type { IncomingMessage } from 'node:http';
import { InvalidCloudEventError } from './errors/invalid-cloud-event.error';
import { CloudEventsBodyUnreadError } from './errors/cloud-events-body-unread.error';
import type { EventrailPublisher, PublishResult } from '../publisher/eventrail.publisher';
import { fromCloudEvents } from './cloud-event.codec';
import { CloudEventsBodyReader, RAW_BODY, type RawBodyRequest } from './cloud-events-body-reader';
import { checkContentEncoding, checkRepeatedAttributeHeaders, eventsFromHttp, httpMode, type HttpBody } from './cloud-events-http';
import { CLOUD_EVENTS_OPTIONS, CLOUD_EVENTS_PUBLISHER } from './cloud-events.constants';
import type { ResolvedCloudEventsOptions } from './cloud-events-ingress.options';

/** A request as Express hands it over (Node's), or Fastify's (`raw` is Node's), with the bytes the body reader kept. */
type IngressRequest = IncomingMessage & RawBodyRequest & { raw?: IncomingMessage };

/**
 * Accepts CloudEvents over HTTP, in binary, structured and batch mode, and
 * appends them to the log (`EventrailCloudEventsModule` mounts it at `path`,
 * behind `CloudEventsAccessGuard`). Every event of a request is validated
 * before any is appended; the reply (202) lists where each went.
 */
@Injectable()
export class EventrailCloudEventsController {
  constructor(
    @Inject(CLOUD_EVENTS_PUBLISHER) private readonly publisher: () => EventrailPublisher,
    private readonly bodyReader: CloudEventsBodyReader,
    @Inject(CLOUD_EVENTS_OPTIONS) private readonly options: ResolvedCloudEventsOptions,
    private readonly adapterHost: HttpAdapterHost,
  ) {}

  /**
   * The CloudEvents webhook validation handshake (abuse protection): a sender
   * such as Azure Event Grid asks with `OPTIONS` and `WebHook-Request-Origin`
   * whether it may deliver; the answer allows that origin. It passes the
   * same access rules as a delivery.
   */
  @Options()
  @HttpCode(200)
  handshake(@Headers('webhook-request-origin') origin: string | undefined, @Res({ passthrough: true }) response: unknown): void {
    if (origin === undefined || !/^[\x21-\x7e]{1,255}$/.test(origin)) {
      throw new BadRequestException('Send WebHook-Request-Origin: <the sender host> to validate this CloudEvents webhook');
    }
    const adapter = this.adapterHost.httpAdapter;
    adapter.setHeader(response, 'WebHook-Allowed-Origin', origin);
    adapter.setHeader(response, 'Allow', 'POST, OPTIONS');
  }

  @Post()
  @HttpCode(202)
  async accept(@Req() request: IngressRequest): Promise<{ accepted: PublishResult[] }> {
    const mode = httpMode(request.headers);
    if (mode === null) {
      throw new UnsupportedMediaTypeException(
        'Send a CloudEvent: binary mode (ce-specversion, ce-id, ce-source, ce-type headers), ' +
          'structured mode (application/cloudevents+json) or batch mode (application/cloudevents-batch+json)',
      );
    }
    checkContentEncoding(request.headers);
    if (mode === 'binary') checkRepeatedAttributeHeaders((request.raw ?? request).rawHeaders);
    const events = eventsFromHttp(mode, request.headers, await this.body(request));
    if (events.length === 0) throw new InvalidCloudEventError('(batch)', 'is empty');
    if (events.length > this.options.maxBatchSize) {
      throw new InvalidCloudEventError('(batch)', `has ${events.length} events, over maxBatchSize (${this.options.maxBatchSize})`);
    }
    // Appended with producer dedup on the derived ids: a retried request appends each event once.
    return { accepted: await this.publisher().publishMany(fromCloudEvents(events)) };
  }

  /** The bytes the body reader kept (Express: read before the app's parsers; Fastify: as they were parsed). */
  private body(request: IngressRequest): Promise<HttpBody> {
    const kept = request[RAW_BODY];
    if (kept !== undefined) return Promise.resolve(kept);
    // Fastify calls no parser for an empty body.
    if (request.raw !== undefined) return Promise.resolve(Buffer.alloc(0));
    if (request.readableEnded) {
      // Another reader took the body (a path the ingress's reader did not recognise): refused, never stored as null.
      const declared = Number(request.headers['content-length'] ?? 0);
      if (declared > 0 || request.headers['transfer-encoding'] !== undefined) throw new CloudEventsBodyUnreadError(request.url ?? '');
      return Promise.resolve(Buffer.alloc(0));
    }
    return this.bodyReader.read(request);
  }
}
