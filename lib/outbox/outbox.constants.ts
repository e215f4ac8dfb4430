/** Injection token of the resolved outbox options. */
export const EVENTRAIL_OUTBOX_OPTIONS = Symbol('EVENTRAIL_OUTBOX_OPTIONS');
