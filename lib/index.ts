export { EventrailModule } from './eventrail.module';
export type {
  ConsumerOptions,
  EventrailModuleAsyncOptions,
  EventrailModuleOptions,
  ClusterConnection,
  Durability,
  InitialOffset,
  RedisConnection,
} from './eventrail.options';
export { DEFAULT_CONSUMER_OPTIONS } from './eventrail.options';
export { DEFAULT_STALE_GROUP_MS, EVENTRAIL_OPTIONS } from './eventrail.constants';
export { OnEvent } from './decorators/on-event.decorator';
export type { OnEventGroupOptions } from './decorators/on-event.decorator';
export type { EventrailMessage } from './eventrail-message';
export { EventrailPublisher } from './publisher/eventrail.publisher';
export type { PublishInput, PublishOptions, PublishResult } from './publisher/eventrail.publisher';
export { EventrailConsumers } from './consumer/eventrail-consumers';
export type { GroupStats } from './consumer/group-stats';
export { EventrailAdmin } from './admin/eventrail-admin';
export { LAG_COUNT_CAP } from './log/lag';
export type { EventrailMetrics, SkipReason } from './metrics/eventrail-metrics';
export type {
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
  PartitionLogStats,
  PartitionStatus,
  ReadLogOptions,
  DashboardOverview,
} from './admin/admin.types';
export type { DeadLetter, GiveUpReason } from './log/dead-letter.codec';
export { partitionForKey } from './log/partitioner';
export { EventrailError } from './errors/eventrail.error';
export { InvalidEventNameError } from './errors/invalid-event-name.error';
export { InvalidEventDataError } from './errors/invalid-event-data.error';
export { InvalidHeadersError } from './errors/invalid-headers.error';
export { InvalidPublishOptionsError } from './errors/invalid-publish-options.error';
export { PayloadTooLargeError } from './errors/payload-too-large.error';
export { InvalidOptionError } from './errors/invalid-option.error';
export { PartitionMismatchError } from './errors/partition-mismatch.error';
export { RedisUnavailableError } from './errors/redis-unavailable.error';
export { InvalidHandlerError } from './errors/invalid-handler.error';
export { NonRetryableError } from './errors/non-retryable.error';
export { HandlerTimeoutError } from './errors/handler-timeout.error';
export { UnknownGroupError } from './errors/unknown-group.error';
export { GroupHasLiveMembersError } from './errors/group-has-live-members.error';
export { ReplicationTimeoutError } from './errors/replication-timeout.error';
export { EvictionPolicyError } from './errors/eviction-policy.error';
export type { NodeEvictionPolicy } from './errors/eviction-policy.error';
export { EventrailRetention } from './retention/eventrail-retention';
export { retentionOptionsFromEnv } from './retention/retention-env';
export type { ArchiveOptions, FsArchiveOptions, RetentionOptions, S3ArchiveOptions } from './retention/retention.options';
export type {
  ArchivedRange,
  ArchiveObject,
  ArchiveSource,
  PartitionRetentionResult,
  ProgressListener,
  RetentionRunResult,
} from './eventrail.types';
export { ScheduleModuleMissingError } from './errors/schedule-module-missing.error';
export { MissingPeerDependencyError } from './errors/missing-peer-dependency.error';
export { ArchiveFormatError } from './errors/archive-format.error';
export { EventrailDashboardModule } from './dashboard/eventrail-dashboard.module';
export { EventrailDashboardLink } from './dashboard/eventrail-dashboard-link';
export type { EventrailDashboardAsyncOptions, EventrailDashboardOptions } from './dashboard/dashboard.options';
export { DashboardAuthRequiredError } from './errors/dashboard-auth-required.error';
export { DashboardAuthDisabledError } from './errors/dashboard-auth-disabled.error';
// Batch handlers and retry by time (issue 14).
export type { BatchOptions } from './decorators/on-event.decorator';
export type { BatchResult } from './consumer/batch-result';
export { DEFAULT_BATCH_OPTIONS } from './eventrail.options';
export { InvalidBatchResultError } from './errors/invalid-batch-result.error';
// Typed events and settled() (issue 14).
export { defineEvent, isEventDefinition } from './events/event-definition';
export type { EventData, EventDefinition, EventInput, EventRef } from './events/event-definition';
export { EventValidationError } from './errors/event-validation.error';
export type { EventValidationIssue } from './errors/event-validation.error';
export { InvalidEventSchemaError } from './errors/invalid-event-schema.error';
export { DEFAULT_SETTLE_TIMEOUT_MS } from './consumer/eventrail-consumers';
export type { SettleOptions } from './consumer/eventrail-consumers';
export { SettleTimeoutError } from './errors/settle-timeout.error';
export type { LaggingPartition } from './errors/settle-timeout.error';
export type { CheckedInput, PublishedData } from './publisher/eventrail.publisher';
// CloudEvents and tracing (issue 15).
export { toCloudEvent, fromCloudEvent, CLOUD_EVENT_HEADERS, HEADERS_EXTENSION } from './cloudevents/cloud-event.codec';
export type { CloudEventPublishInput, EventrailCloudEvent } from './cloudevents/cloud-event.codec';
export { EventrailCloudEvents } from './cloudevents/eventrail-cloud-events';
export { InvalidCloudEventError } from './errors/invalid-cloud-event.error';
export type { TracingOptions } from './tracing/tracing.options';
export { EventrailCloudEventsModule } from './cloudevents/eventrail-cloud-events.module';
export { EventrailCloudEventsController } from './cloudevents/eventrail-cloud-events.controller';
export type { EventrailCloudEventsOptions } from './cloudevents/cloud-events-ingress.options';
export { IngressAuthRequiredError } from './errors/ingress-auth-required.error';
// Sentinel, TLS and managed Redis (issue 17)
export type { SentinelConnection } from './eventrail.options';
export { RedisTlsError } from './errors/redis-tls.error';
export { RedisPermissionError } from './errors/redis-permission.error';
export { eventrailAclRules } from './redis/acl-rules';
export type { EventrailAclRules } from './redis/acl-rules';
