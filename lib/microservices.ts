// Entry point `nestjs-eventrail/microservices`: kept apart so @nestjs/microservices stays an optional peer.
export { EventrailServer, EVENTRAIL_TRANSPORT } from './microservices/eventrail-server';
export { EventrailClient } from './microservices/eventrail-client';
export { EventrailContext } from './microservices/eventrail-context';
export { EventrailRecord, EventrailRecordBuilder } from './microservices/eventrail-record';
export type { EventrailRecordOptions } from './microservices/eventrail-record';
export { EventrailExceptionFilter } from './microservices/eventrail-exception.filter';
export type { EventrailClientOptions, EventrailServerOptions } from './microservices/transport.options';
export { RequestResponseNotSupportedError } from './microservices/errors/request-response-not-supported.error';
export { InvalidPatternError } from './microservices/errors/invalid-pattern.error';
export { HandlerReplyError } from './microservices/errors/handler-reply.error';
export { ClientClosedError } from './microservices/errors/client-closed.error';
