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
// Sentinel, TLS and managed Redis (issue 17)
export type { SentinelConnection } from './eventrail.options';
export { RedisTlsError } from './errors/redis-tls.error';
export { RedisPermissionError } from './errors/redis-permission.error';
export { eventrailAclRules } from './redis/acl-rules';
export type { EventrailAclRules } from './redis/acl-rules';
