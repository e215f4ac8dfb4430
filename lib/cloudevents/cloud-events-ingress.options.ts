import { IngressAuthRequiredError } from './errors/ingress-auth-required.error';
import { InvalidOptionError } from '../errors/invalid-option.error';
import { checkBoolean, checkInteger, checkObject, rejectUnknownKeys } from '../config/option-checks';

export interface EventrailCloudEventsOptions {
  /**
   * Where CloudEvents are accepted (`POST <path>`). Relative to the app's global prefix, if any.
   * @default '/cloudevents'
   */
  path?: string;
  /**
   * Bearer token every request must present (`Authorization: Bearer <token>`), compared in constant time.
   * Without one (left out, or `false`) the ingress answers only this machine, as the dashboard does without
   * a configured token; in production (`NODE_ENV=production`) startup then fails with `IngressAuthRequiredError`.
   * @default none: this machine only
   */
  auth?: { token: string } | false;
  /**
   * Behind one reverse proxy the app trusts: `X-Forwarded-*` / `Forwarded` count, as in the dashboard.
   * @default false
   */
  trustProxy?: boolean;
  /**
   * Most events in one batch-mode request (`application/cloudevents-batch+json`).
   * @default 100
   */
  maxBatchSize?: number;
  /**
   * Producer dedup of the ingress's appends: a CloudEvent (unique by `source` + `id`) sent again within
   * this window, by a sender retrying a request that failed partway or a webhook source redelivering,
   * appends nothing and is answered with the first append's offset and `duplicate: true`. Costs one
   * Redis key of about 150 bytes per event for the window. 0 turns it off.
   * @default 3_600_000 (one hour)
   */
  dedupWindowMs?: number;
}

export interface ResolvedCloudEventsOptions {
  path: string;
  token: string | null;
  trustProxy: boolean;
  maxBatchSize: number;
  dedupWindowMs: number;
}

export const CLOUD_EVENTS_INGRESS_DEFAULTS = Object.freeze({
  path: '/cloudevents',
  trustProxy: false,
  maxBatchSize: 100,
  dedupWindowMs: 3_600_000,
});

export const KNOWN = ['path', 'auth', 'trustProxy', 'maxBatchSize', 'dedupWindowMs'];
const PATH = /^(\/[A-Za-z0-9._~-]+)+$/;
const TOKEN = /^\S+$/;

export function resolveCloudEventsOptions(
  options: EventrailCloudEventsOptions = {},
  env: NodeJS.ProcessEnv = process.env,
): ResolvedCloudEventsOptions {
  checkObject('cloudEventsIngress', options, 'an options object');
  rejectUnknownKeys('cloudEventsIngress', options, KNOWN);
  const path = options.path ?? CLOUD_EVENTS_INGRESS_DEFAULTS.path;
  if (typeof path !== 'string' || !PATH.test(path)) {
    throw new InvalidOptionError('cloudEventsIngress.path', path, 'a URL path such as "/cloudevents" (no trailing slash)');
  }
  const trustProxy = checkBoolean('cloudEventsIngress.trustProxy', options.trustProxy ?? CLOUD_EVENTS_INGRESS_DEFAULTS.trustProxy);
  const maxBatchSize = checkInteger(
    'cloudEventsIngress.maxBatchSize',
    options.maxBatchSize ?? CLOUD_EVENTS_INGRESS_DEFAULTS.maxBatchSize,
    1,
    10_000,
  );
  const dedupWindowMs = checkInteger(
    'cloudEventsIngress.dedupWindowMs',
    options.dedupWindowMs ?? CLOUD_EVENTS_INGRESS_DEFAULTS.dedupWindowMs,
    0,
    30 * 86_400_000,
  );
  const { auth } = options;
  if (auth === undefined || auth === false) {
    if (env.NODE_ENV === 'production') throw new IngressAuthRequiredError(path);
    return { path, token: null, trustProxy, maxBatchSize, dedupWindowMs };
  }
  if (auth === null || typeof auth !== 'object' || typeof (auth as { token?: unknown }).token !== 'string') {
    throw new InvalidOptionError('cloudEventsIngress.auth', typeof auth, '{ token: "<a secret>" }, or false for this machine only');
  }
  rejectUnknownKeys('cloudEventsIngress.auth', { ...auth, token: '<hidden>' }, ['token']);
  // The secret itself never goes into an error.
  if (!TOKEN.test(auth.token)) {
    throw new InvalidOptionError(
      'cloudEventsIngress.auth.token',
      `<hidden, ${auth.token.length} characters>`,
      'a non-empty secret without spaces',
    );
  }
  return { path, token: auth.token, trustProxy, maxBatchSize, dedupWindowMs };
}
