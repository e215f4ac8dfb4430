/** Injection token of the resolved CloudEvents ingress options. */
export const CLOUD_EVENTS_OPTIONS = Symbol('EVENTRAIL_CLOUD_EVENTS_OPTIONS');
/** Injection token of the publisher the ingress appends with: the app's options, with the ingress's dedup window. */
export const CLOUD_EVENTS_PUBLISHER = Symbol('EVENTRAIL_CLOUD_EVENTS_PUBLISHER');
