// Entry point `nestjs-eventrail/outbox`: kept apart so pg, TypeORM, Kysely and Drizzle stay the app's own choice.
export { EventrailOutboxModule } from './outbox/eventrail-outbox.module';
export type {
  EventrailOutboxModuleAsyncOptions,
  EventrailOutboxModuleOptions,
  InboxOptions,
  OutboxRelayOptions,
} from './outbox/outbox.options';
export { OUTBOX_DEFAULTS } from './outbox/outbox.options';
export { EVENTRAIL_OUTBOX_OPTIONS } from './outbox/outbox.constants';
export { EventrailOutbox } from './outbox/eventrail-outbox';
export type { OutboxPublishInput, OutboxPublishOptions, OutboxRecord } from './outbox/eventrail-outbox';
export { EventrailInbox } from './outbox/eventrail-inbox';
export type { InboxResult } from './outbox/eventrail-inbox';
export { EventrailOutboxRelay } from './outbox/outbox-relay';
export type { OutboxRelayStats } from './outbox/outbox-relay';
export type { OutboxConnector, RelaySession, Row } from './outbox/connectors/outbox-connector';
export { pgConnector } from './outbox/connectors/pg.connector';
export { schemaSql } from './outbox/outbox-schema';
export { InvalidOutboxTransactionError } from './outbox/errors/invalid-outbox-transaction.error';
export { OutboxSchemaMissingError } from './outbox/errors/outbox-schema-missing.error';
export { InboxTransactionAbortedError } from './outbox/errors/inbox-transaction-aborted.error';
export { OutboxSchemaMismatchError } from './outbox/errors/outbox-schema-mismatch.error';
export { typeormConnector, type TypeormDataSource, type TypeormEntityManager } from './outbox/connectors/typeorm.connector';
export { kyselyConnector } from './outbox/connectors/kysely.connector';
export type { KyselyConnectorOptions, KyselyDatabase, KyselyTransaction } from './outbox/connectors/kysely.connector';
export { drizzleConnector, type DrizzleDatabase, type DrizzleTransaction } from './outbox/connectors/drizzle.connector';
export { EventrailOutboxAdmin } from './outbox/eventrail-outbox-admin';
export type { OutboxOverview } from './outbox/eventrail-outbox-admin';
export type { OutboxStatus } from './outbox/outbox-status.reader';
export { pgliteConnector, type PgliteDatabase, type PgliteTransaction } from './outbox/connectors/pglite.connector';
