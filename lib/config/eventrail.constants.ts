/** Injection token of the resolved module options. */
export const EVENTRAIL_OPTIONS = Symbol('EVENTRAIL_OPTIONS');
/** Injection token of the raw options given to `forRoot` / returned by the `forRootAsync` factory. */
export const EVENTRAIL_RAW_OPTIONS = Symbol('EVENTRAIL_RAW_OPTIONS');
/** Metadata key under which `@OnEvent` records its declarations on a class. */
export const ON_EVENT_METADATA = 'eventrail:on-event';
/** How long all members of a group must have been gone before it counts as stale (pruning, retention), by default. */
export const DEFAULT_STALE_GROUP_MS = 24 * 60 * 60 * 1000;
/** Injection token under which `EventrailRetention` serves the admin service (`RetentionOperations`). */
export const EVENTRAIL_RETENTION = Symbol('EVENTRAIL_RETENTION');
