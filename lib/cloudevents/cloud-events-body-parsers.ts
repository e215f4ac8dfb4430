import { Injectable, OnModuleInit } from '@nestjs/common';
import { HttpAdapterHost } from '@nestjs/core';

/** The content types of structured and batch mode, which neither Express's nor Fastify's default parsers read. */
export const CLOUD_EVENTS_CONTENT_TYPES = ['application/cloudevents+json', 'application/cloudevents-batch+json'];

/** The part of Fastify's instance used here. */
interface FastifyParsers {
  hasContentTypeParser(type: string): boolean;
  addContentTypeParser(
    type: string,
    options: { parseAs: 'string'; bodyLimit?: number },
    parser: (request: unknown, body: string, done: (error: Error | null, body?: unknown) => void) => void,
  ): void;
}

/**
 * On Fastify, which refuses a content type it has no parser for (415) before
 * any handler runs, registers the CloudEvents types as text for the ingress
 * to parse. On Express nothing is needed: the ingress reads the unparsed body.
 */
@Injectable()
export class CloudEventsBodyParsers implements OnModuleInit {
  constructor(private readonly adapterHost: HttpAdapterHost) {}

  onModuleInit(): void {
    const adapter = this.adapterHost.httpAdapter as { getType?(): string; getInstance?(): unknown } | undefined;
    if (adapter?.getType?.() !== 'fastify') return;
    const fastify = adapter.getInstance!() as FastifyParsers;
    for (const type of CLOUD_EVENTS_CONTENT_TYPES) {
      if (!fastify.hasContentTypeParser(type))
        fastify.addContentTypeParser(type, { parseAs: 'string' }, (_request, body, done) => done(null, body));
    }
  }
}
