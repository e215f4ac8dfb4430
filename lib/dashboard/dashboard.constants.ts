/** Injection token of the resolved dashboard options. */
export const DASHBOARD_OPTIONS = Symbol('EVENTRAIL_DASHBOARD_OPTIONS');
/** Raw options as given to `registerAsync`'s factory, before defaults. */
export const DASHBOARD_RAW_OPTIONS = Symbol('EVENTRAIL_DASHBOARD_RAW_OPTIONS');
/** Route metadata: reachable without the token (the UI's bootstrap call and CORS preflights). */
export const DASHBOARD_PUBLIC = 'eventrail:dashboard:public';
/** Route metadata: changes data, so refused when the dashboard is read-only. */
export const DASHBOARD_WRITE = 'eventrail:dashboard:write';
