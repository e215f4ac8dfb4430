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
import { PayloadTooLargeError } from '../errors/payload-too-large.error';
import { InvalidCloudEventError } from './errors/invalid-cloud-event.error';
import type { PublishResult } from '../publisher/eventrail.publisher';
import { eventsFromHttp, httpMode, type HttpBody } from './cloud-events-http';
import { CLOUD_EVENTS_OPTIONS } from './cloud-events.constants';
import type { ResolvedCloudEventsOptions } from './cloud-events-ingress.options';
import { EventrailCloudEvents } from './eventrail-cloud-events';

/** Largest request body read, in bytes: what one event's data may be, plus room for its attributes. */
const MAX_BODY_BYTES = 16 * 1024 * 1024;

/** A request as Express hands it over (Node's, with what a body parser may have made of it), or Fastify (`raw` is Node's). */
type IngressRequest = IncomingMessage & { body?: unknown; raw?: IncomingMessage };

/**
 * Accepts CloudEvents over HTTP, in binary, structured and batch mode, and
 * appends them to the log (`EventrailCloudEventsModule` mounts it at `path`,
 * behind `CloudEventsAccessGuard`). Every event of a request is validated
 * before any is appended; the reply (202) lists where each went.
 */
@Injectable()
export class EventrailCloudEventsController {
  constructor(
    private readonly cloudEvents: EventrailCloudEvents,
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
    const events = eventsFromHttp(mode, request.headers, await readBody(request));
    if (events.length === 0) throw new InvalidCloudEventError('(batch)', 'is empty');
    if (events.length > this.options.maxBatchSize) {
      throw new InvalidCloudEventError('(batch)', `has ${events.length} events, over maxBatchSize (${this.options.maxBatchSize})`);
    }
    return { accepted: await this.cloudEvents.publish(events) };
  }
}

/** The body a parser already read (JSON, text; always on Fastify), or else read here as text, up to `MAX_BODY_BYTES`. */
async function readBody(request: IngressRequest): Promise<HttpBody> {
  if (request.raw !== undefined || request.readableEnded) return request.body as HttpBody;
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of request as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > MAX_BODY_BYTES) throw new PayloadTooLargeError('(cloudevents request)', size, MAX_BODY_BYTES);
    chunks.push(chunk);
  }
  return Buffer.concat(chunks).toString('utf8');
}
