import { Inject, Injectable } from '@nestjs/common';
import { ApplicationConfig, HttpAdapterHost } from '@nestjs/core';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { Transform, type Readable } from 'node:stream';
import { EVENTRAIL_OPTIONS } from '../config/eventrail.constants';
import { CLOUD_EVENTS_OPTIONS } from './cloud-events.constants';
import type { ResolvedCloudEventsOptions } from './cloud-events-ingress.options';
import { CloudEventsRequestTooLargeError } from './errors/cloud-events-request-too-large.error';
import { checkContentEncoding } from './cloud-events-http';

/** The content types of structured and batch mode, which neither Express's nor Fastify's default parsers read. */
export const CLOUD_EVENTS_CONTENT_TYPES = ['application/cloudevents+json', 'application/cloudevents-batch+json'];

/** Room for the attributes (structured mode) or the envelope (batch mode) on top of `maxPayloadBytes`. */
export const ATTRIBUTE_ROOM_BYTES = 64 * 1024;

/** Where the bytes of an ingress request, as sent, are kept on the request for the controller. */
export const RAW_BODY = Symbol('eventrail.cloudEvents.rawBody');

export type RawBodyRequest = { [RAW_BODY]?: Buffer };

/** The parts of Fastify's instance used here (public API). */
interface FastifyInstanceLike {
  hasContentTypeParser(type: string): boolean;
  addContentTypeParser(
    type: string,
    options: { parseAs: 'buffer' },
    parser: (request: unknown, body: Buffer, done: (error: Error | null, body?: unknown) => void) => void,
  ): void;
  addHook(name: 'onRoute', hook: (route: FastifyRoute) => void): void;
}

type PreParsing = (
  request: RawBodyRequest & { headers: IncomingMessage['headers'] },
  reply: unknown,
  payload: Readable,
) => Promise<Readable>;

interface FastifyRoute {
  url: string;
  method: string | string[];
  bodyLimit?: number;
  preParsing?: PreParsing | PreParsing[];
  errorHandler?: (error: FastifyError, request: { headers: IncomingMessage['headers'] }, reply: FastifyReply) => void;
}

interface FastifyError extends Error {
  statusCode?: number;
  code?: string;
}

interface FastifyReply {
  code(status: number): FastifyReply;
  header(name: string, value: string): FastifyReply;
  send(body: unknown): void;
}

/**
 * Makes the ingress see every request body as the bytes that were sent, up to one limit (`maxPayloadBytes`
 * plus `ATTRIBUTE_ROOM_BYTES`) on Express and Fastify alike, so that the app's own body parsers (their
 * limits, their strict JSON, their form decoding) never decide what a CloudEvent's data is. It hooks in
 * when the HTTP adapter is set, which is before the app registers its parsers and routes:
 *
 * - Express: a middleware ahead of the app's parsers reads the ingress's requests itself (a request read
 *   to the end is one the parsers skip), and answers 413 at the limit.
 * - Fastify: the ingress route gets the limit as its `bodyLimit`, a `preParsing` hook that keeps the
 *   bytes, an error handler that answers the ingress's error body, and the CloudEvents content types
 *   get a parser when the app has none (Fastify refuses a type without one).
 */
@Injectable()
export class CloudEventsBodyReader {
  readonly limit: number;

  constructor(
    adapterHost: HttpAdapterHost,
    @Inject(CLOUD_EVENTS_OPTIONS) private readonly options: ResolvedCloudEventsOptions,
    @Inject(EVENTRAIL_OPTIONS) private readonly moduleOptions: { maxPayloadBytes: number },
    private readonly appConfig: ApplicationConfig,
  ) {
    this.limit = moduleOptions.maxPayloadBytes + ATTRIBUTE_ROOM_BYTES;
    adapterHost.init$.subscribe(() => this.install(adapterHost));
  }

  /** Reads a request to the end, refusing it past the limit (`CloudEventsRequestTooLargeError`) without reading on. */
  read(request: IncomingMessage): Promise<Buffer> {
    const declared = Number(request.headers['content-length']);
    if (Number.isFinite(declared) && declared > this.limit) return Promise.reject(this.tooLarge(declared));
    return new Promise((resolve, reject) => {
      const chunks: Buffer[] = [];
      let size = 0;
      const stop = (): void => {
        request.off('data', onData);
        request.off('end', onEnd);
        request.off('error', onError);
      };
      const onData = (chunk: Buffer): void => {
        size += chunk.length;
        if (size <= this.limit) return void chunks.push(chunk);
        stop();
        request.pause();
        reject(this.tooLarge(null));
      };
      const onEnd = (): void => {
        stop();
        resolve(Buffer.concat(chunks, size));
      };
      const onError = (error: Error): void => {
        stop();
        reject(error);
      };
      request.on('data', onData).on('end', onEnd).on('error', onError);
    });
  }

  tooLarge(bytes: number | null): CloudEventsRequestTooLargeError {
    return new CloudEventsRequestTooLargeError(bytes, this.limit, this.moduleOptions.maxPayloadBytes);
  }

  private install(adapterHost: HttpAdapterHost): void {
    const adapter = adapterHost.httpAdapter as { getType?(): string; getInstance?(): unknown } | undefined;
    const type = adapter?.getType?.();
    if (type === 'express') this.installExpress(adapter!.getInstance!() as { use(handler: ExpressMiddleware): void });
    if (type === 'fastify') this.installFastify(adapter!.getInstance!() as FastifyInstanceLike);
  }

  /**
   * The ingress route's full path as Nest mounts it: the global prefix, then `path`. Read at each use, since the
   * app sets its prefix after this reader is made.
   */
  private routePath(): string {
    const prefix = this.appConfig.getGlobalPrefix().replace(/^\/+|\/+$/g, '');
    return prefix === '' ? this.options.path : `/${prefix}${this.options.path}`;
  }

  /**
   * Whether Express routes a request path to the ingress, matched as its router matches a route: case-insensitive,
   * one trailing slash allowed, percent-encoding decoded. Only the ingress's own route: another route whose path
   * merely ends the same way keeps the app's parsers and limits.
   */
  private isExpressIngress(url: string): boolean {
    let path = url.split('?')[0];
    try {
      path = decodeURIComponent(path);
    } catch {
      // Not decodable: compared as sent.
    }
    if (path.length > 1 && path.endsWith('/')) path = path.slice(0, -1);
    return path.toLowerCase() === this.routePath().toLowerCase();
  }

  private installExpress(express: { use(handler: ExpressMiddleware): void }): void {
    express.use((request, response, next) => {
      if (request.method !== 'POST' || !this.isExpressIngress(request.url ?? '')) return next();
      const refuse = (status: number, error: Error): void => {
        // The rest of the body is not read: the connection closes after this answer.
        response.statusCode = status;
        response.setHeader('content-type', 'application/json; charset=utf-8');
        response.setHeader('connection', 'close');
        response.end(JSON.stringify({ statusCode: status, error: error.name, message: error.message }));
      };
      try {
        checkContentEncoding(request.headers);
      } catch (error) {
        return refuse(415, error as Error);
      }
      this.read(request).then(
        (body) => {
          (request as RawBodyRequest)[RAW_BODY] = body;
          next();
        },
        (error: unknown) => {
          if (!(error instanceof CloudEventsRequestTooLargeError)) return next(error);
          refuse(413, error);
        },
      );
    });
  }

  private installFastify(fastify: FastifyInstanceLike): void {
    for (const type of CLOUD_EVENTS_CONTENT_TYPES) {
      if (!fastify.hasContentTypeParser(type))
        fastify.addContentTypeParser(type, { parseAs: 'buffer' }, (_r, body, done) => done(null, body));
    }
    const keepBytes: PreParsing = (request, _reply, payload) => {
      try {
        checkContentEncoding(request.headers);
      } catch (error) {
        return Promise.reject(error as Error);
      }
      // The HTTP binding: binary mode without Content-Type is JSON data, as on Express (Fastify would answer 415).
      if (request.headers['content-type'] === undefined && request.headers['ce-specversion'] !== undefined)
        request.headers['content-type'] = 'application/json';
      const chunks: Buffer[] = [];
      const tee = new Transform({
        transform(chunk: Buffer, _encoding, callback) {
          chunks.push(chunk);
          callback(null, chunk);
        },
        flush(callback) {
          request[RAW_BODY] = Buffer.concat(chunks);
          callback();
        },
      });
      return Promise.resolve(payload.pipe(tee));
    };
    fastify.addHook('onRoute', (route) => {
      const methods = Array.isArray(route.method) ? route.method : [route.method];
      // Fastify registers the route with its full path (global prefix included): only that exact route.
      if (!methods.includes('POST') || route.url !== this.routePath()) return;
      route.bodyLimit = this.limit;
      route.preParsing = [...(route.preParsing === undefined ? [] : [route.preParsing].flat()), keepBytes];
      route.errorHandler ??= (error, request, reply) => {
        // Only what fails before the handler runs lands here (the body's size, type or syntax).
        const status = (error as { statusCode?: number }).statusCode ?? 500;
        const declared = Number(request.headers['content-length']);
        const refused = status === 413 ? this.tooLarge(Number.isFinite(declared) ? declared : null) : error;
        reply.code(status).send({ statusCode: status, error: refused.name, message: refused.message });
      };
    });
  }
}

type ExpressMiddleware = (request: IncomingMessage, response: ServerResponse, next: (error?: unknown) => void) => void;
