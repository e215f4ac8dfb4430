/** Injection token of the resolved CloudEvents ingress options. */
export const CLOUD_EVENTS_OPTIONS = Symbol('EVENTRAIL_CLOUD_EVENTS_OPTIONS');
