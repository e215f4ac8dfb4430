// The main entry point, grouped by concern. Optional integrations have entry
// points of their own (health, prometheus, outbox, microservices, testing), so
// their peer dependencies stay optional.

// Module and options
export { EventrailModule } from './module/eventrail.module';
export type { EventrailModuleAsyncOptions, EventrailModuleOptions } from './module/eventrail.options';
export type { ConsumerOptions, InitialOffset, Ordering, RedeliveryOptions } from './consumer/consumer.options';
export type { ClusterConnection, Durability, RedisConnection, SentinelConnection } from './redis/connection.options';
export { DEFAULT_BATCH_OPTIONS, DEFAULT_CONSUMER_OPTIONS } from './consumer/consumer.options';
export { EVENTRAIL_OPTIONS } from './config/eventrail.constants';
export { DEFAULT_STALE_GROUP_MS } from './admin/group-facts.reader';
export { eventrailAclRules } from './redis/acl-rules';
export type { EventrailAclRules } from './redis/acl-rules';

// Events: definitions, what handlers receive
export { defineEvent, isEventDefinition } from './events/event-definition';
export type { EventData, EventDefinition, EventInput, EventRef } from './events/event-definition';
export type { EventrailMessage } from './events/eventrail-message';
export { partitionForKey } from './wire/partitioner';

// Publishing
export { EventrailPublisher } from './publisher/eventrail.publisher';
export type { CheckedInput, PublishedData, PublishInput, PublishOptions, PublishResult } from './publisher/eventrail.publisher';

// Consuming
export { OnEvent } from './decorators/on-event.decorator';
export type { BatchOptions, OnEventGroupOptions } from './decorators/on-event.decorator';
export type { BatchResult } from './consumer/handling/batch-result';
export { EventrailConsumers, DEFAULT_SETTLE_TIMEOUT_MS } from './consumer/lifecycle/eventrail-consumers';
export type { SettleOptions } from './consumer/lifecycle/eventrail-consumers';
export type { GroupStats } from './consumer/pipeline/group-stats';
export type { DeadLetter, GiveUpReason } from './wire/dead-letter.codec';

// Operating the log: admin, retention, metrics hooks
export { EventrailAdmin } from './admin/eventrail-admin';
export { LAG_COUNT_CAP } from './consumer/coordination/lag';
export type {
  DashboardOverview,
  DeadLetterPage,
  FollowOptions,
  GroupStatus,
  LogEntry,
  LogPage,
  LogStats,
  MemberStatus,
  NodeStatus,
  OffsetChange,
  OffsetResetResult,
  OffsetTarget,
  ParkedHead,
  ParkedKey,
  PartitionLogStats,
  PartitionStatus,
  ReadLogOptions,
} from './admin/admin.types';
export type {
  ArchivedRange,
  ArchiveObject,
  ArchiveSource,
  PartitionRetentionResult,
  ProgressListener,
  RetentionRunResult,
} from './admin/operations.types';
export { EventrailRetention } from './retention/eventrail-retention';
export { retentionOptionsFromEnv } from './retention/retention-env';
export type { ArchiveOptions, FsArchiveOptions, RetentionOptions, S3ArchiveOptions } from './retention/retention.options';
export type { EventrailMetrics, SkipReason } from './metrics/eventrail-metrics';
export { GroupLagReader } from './metrics/group-lag.reader';
export type { LagReport } from './metrics/group-lag.reader';
export type { GroupLag } from './metrics/group-lag';

// Dashboard
export { EventrailDashboardModule } from './dashboard/eventrail-dashboard.module';
export { EventrailDashboardLink } from './dashboard/eventrail-dashboard-link';
export type { EventrailDashboardAsyncOptions, EventrailDashboardOptions } from './dashboard/dashboard.options';
export { DashboardAuthDisabledError } from './dashboard/errors/dashboard-auth-disabled.error';
export { DashboardAuthRequiredError } from './dashboard/errors/dashboard-auth-required.error';

// CloudEvents and tracing
export { CLOUD_EVENT_HEADERS, cloudEventId, fromCloudEvent, HEADERS_EXTENSION, toCloudEvent } from './cloudevents/cloud-event.codec';
export type { CloudEventPublishInput, EventrailCloudEvent } from './cloudevents/cloud-event.codec';
export { EventrailCloudEvents } from './cloudevents/eventrail-cloud-events';
export { EventrailCloudEventsModule } from './cloudevents/eventrail-cloud-events.module';
export { EventrailCloudEventsController } from './cloudevents/eventrail-cloud-events.controller';
export type { EventrailCloudEventsOptions } from './cloudevents/cloud-events-ingress.options';
export { CloudEventsRequestTooLargeError } from './cloudevents/errors/cloud-events-request-too-large.error';
export { IngressAuthRequiredError } from './cloudevents/errors/ingress-auth-required.error';
export { InvalidCloudEventError } from './cloudevents/errors/invalid-cloud-event.error';
export { CloudEventsBodyUnreadError } from './cloudevents/errors/cloud-events-body-unread.error';
export { InvalidUtf8BodyError } from './cloudevents/errors/invalid-utf8-body.error';
export { UnsupportedCloudEventsBodyError } from './cloudevents/errors/unsupported-cloud-events-body.error';
export type { TracingOptions } from './tracing/tracing.options';

// Errors of the core: one base class, a subclass per problem
export { EventrailError } from './errors/eventrail.error';
export { ArchiveFormatError } from './errors/archive-format.error';
export { EventValidationError } from './errors/event-validation.error';
export type { EventValidationIssue } from './errors/event-validation.error';
export { EvictionPolicyError } from './errors/eviction-policy.error';
export type { NodeEvictionPolicy } from './errors/eviction-policy.error';
export { GroupHasLiveMembersError } from './errors/group-has-live-members.error';
export { HandlerTimeoutError } from './errors/handler-timeout.error';
export { InvalidBatchResultError } from './errors/invalid-batch-result.error';
export { InvalidEventDataError } from './errors/invalid-event-data.error';
export { InvalidEventNameError } from './errors/invalid-event-name.error';
export { InvalidEventSchemaError } from './errors/invalid-event-schema.error';
export { InvalidHandlerError } from './errors/invalid-handler.error';
export { InvalidHeadersError } from './errors/invalid-headers.error';
export { InvalidDeadLetterError } from './errors/invalid-dead-letter.error';
export { InvalidOptionError } from './errors/invalid-option.error';
export { InvalidPublishOptionsError } from './errors/invalid-publish-options.error';
export { MissingPeerDependencyError } from './errors/missing-peer-dependency.error';
export { NonRetryableError } from './errors/non-retryable.error';
export { PartitionMismatchError } from './errors/partition-mismatch.error';
export { PayloadTooLargeError } from './errors/payload-too-large.error';
export { PublishManyError, type PublishOutcome } from './errors/publish-many.error';
export { PublishTimeoutError } from './errors/publish-timeout.error';
export { RedisFullError } from './errors/redis-full.error';
export { RedisPermissionError } from './errors/redis-permission.error';
export { RedisTlsError } from './errors/redis-tls.error';
export { RedisUnavailableError } from './errors/redis-unavailable.error';
export { ReplicationTimeoutError } from './errors/replication-timeout.error';
export { ScheduleModuleMissingError } from './errors/schedule-module-missing.error';
export { SettleTimeoutError } from './errors/settle-timeout.error';
export type { LaggingPartition } from './errors/settle-timeout.error';
export { UnknownGroupError } from './errors/unknown-group.error';
