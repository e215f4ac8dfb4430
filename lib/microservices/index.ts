// Entry point `nestjs-eventrail/microservices`: kept apart so @nestjs/microservices stays an optional peer.
export { EventrailServer, EVENTRAIL_TRANSPORT } from './eventrail-server';
export { EventrailClient } from './eventrail-client';
export { EventrailContext } from './eventrail-context';
export { EventrailRecord, EventrailRecordBuilder } from './eventrail-record';
export type { EventrailRecordOptions } from './eventrail-record';
export { EventrailExceptionFilter } from './eventrail-exception.filter';
export type { EventrailClientOptions, EventrailServerOptions } from './transport.options';
export { RequestResponseNotSupportedError } from '../errors/request-response-not-supported.error';
export { InvalidPatternError } from '../errors/invalid-pattern.error';
export { HandlerReplyError } from '../errors/handler-reply.error';
