import type { FactoryProvider, ModuleMetadata } from '@nestjs/common';
import { randomBytes } from 'node:crypto';
import { DashboardAuthDisabledError } from './errors/dashboard-auth-disabled.error';
import { DashboardAuthRequiredError } from './errors/dashboard-auth-required.error';
import { InvalidOptionError } from '../errors/invalid-option.error';
import { checkBoolean, checkInteger, checkObject, rejectUnknownKeys } from '../config/option-checks';

export interface EventrailDashboardOptions {
  /**
   * Where the UI is served; the JSON API is under `<path>/api/`. Relative to the app's global prefix, if any.
   * @default '/eventrail'
   */
  path?: string;
  /**
   * Bearer token that every API call must present (`Authorization: Bearer <token>`), compared in constant time.
   * Required when `NODE_ENV` is `production`: startup fails without it there.
   *
   * Left out, a random token is generated at startup and the dashboard's URL carrying it in its fragment
   * (`http://localhost:3000/eventrail#token=...`) is logged; `false` turns the token off (with a warning;
   * refused in production). Without a configured token, the API also answers only this machine: a
   * loopback connection addressed to a loopback name, whatever the request's headers claim.
   * @default a token generated at startup
   */
  auth?: { token: string } | false;
  /**
   * Hide every write control in the UI and refuse every write call (replay, purge) with 403.
   * @default false
   */
  readOnly?: boolean;
  /** Origins allowed to call the API from another site (CORS). None by default: same origin only. */
  cors?: { origins: string[] };
  /**
   * The app sits behind one reverse proxy that it trusts: the client is the last address of `X-Forwarded-For`
   * (or `Forwarded`), and the public host the first of `X-Forwarded-Host`. Off, those headers never count,
   * and without a configured token a request that carries them is refused (it came through a proxy).
   * @default false
   */
  trustProxy?: boolean;
  /**
   * How often the UI refreshes its data, in ms.
   * @default 2000
   */
  refreshMs?: number;
}

export interface EventrailDashboardAsyncOptions extends Pick<ModuleMetadata, 'imports'> {
  /**
   * Where the UI is served. Given here rather than by the factory: Nest maps
   * routes from the controllers' paths before async providers resolve.
   * @default '/eventrail'
   */
  path?: string;
  inject?: FactoryProvider['inject'];
  useFactory: (...args: never[]) => Omit<EventrailDashboardOptions, 'path'> | Promise<Omit<EventrailDashboardOptions, 'path'>>;
}

/**
 * Where the token comes from: the options (`configured`), a random one made at startup (`generated`), or none
 * (`auth: false`). Only a configured token opens the API to other machines.
 */
export type DashboardTokenSource = 'configured' | 'generated' | 'none';

export interface ResolvedDashboardOptions {
  path: string;
  token: string | null;
  tokenSource: DashboardTokenSource;
  readOnly: boolean;
  origins: ReadonlySet<string>;
  trustProxy: boolean;
  refreshMs: number;
}

export const DASHBOARD_DEFAULTS = Object.freeze({ path: '/eventrail', readOnly: false, trustProxy: false, refreshMs: 2000 });

export const KNOWN = ['path', 'auth', 'readOnly', 'cors', 'trustProxy', 'refreshMs'] as const;
const PATH = /^(\/[A-Za-z0-9._~-]+)+$/;
const ORIGIN = /^https?:\/\/[^/\s]+$/;
/** What a bearer header can carry: a token with whitespace could never be presented. */
const TOKEN = /^\S+$/;
/** 192 random bits, URL-safe so that it travels in the fragment as it is. */
const GENERATED_TOKEN_BYTES = 24;

/** The mount path, checked: routes are built from it before the options factory of `registerAsync` runs. */
export function resolveDashboardPath(path: unknown = DASHBOARD_DEFAULTS.path): string {
  if (typeof path !== 'string' || !PATH.test(path)) {
    throw new InvalidOptionError('dashboard.path', path, 'a URL path such as "/eventrail" (no trailing slash)');
  }
  return path;
}

/**
 * Applies defaults and checks every option once; throws `InvalidOptionError`, `DashboardAuthRequiredError` or
 * `DashboardAuthDisabledError`. A left-out token is generated here, so one registration has one token.
 */
export function resolveDashboardOptions(
  options: EventrailDashboardOptions,
  env: NodeJS.ProcessEnv = process.env,
): ResolvedDashboardOptions {
  checkObject('dashboard', options, 'an options object');
  rejectUnknownKeys('dashboard', options, KNOWN);
  const path = resolveDashboardPath(options.path);
  const {
    readOnly = DASHBOARD_DEFAULTS.readOnly,
    cors,
    trustProxy = DASHBOARD_DEFAULTS.trustProxy,
    refreshMs = DASHBOARD_DEFAULTS.refreshMs,
  } = options;
  const { token, tokenSource } = resolveAuth(path, options.auth, env);
  checkBoolean('dashboard.readOnly', readOnly);
  checkBoolean('dashboard.trustProxy', trustProxy);
  if (cors !== undefined && (cors === null || typeof cors !== 'object' || !Array.isArray(cors.origins))) {
    throw new InvalidOptionError('dashboard.cors', cors, '{ origins: ["https://admin.example.com"] }');
  }
  if (cors) rejectUnknownKeys('dashboard.cors', cors, ['origins']);
  for (const origin of cors?.origins ?? []) {
    if (typeof origin !== 'string' || !ORIGIN.test(origin)) {
      throw new InvalidOptionError(
        'dashboard.cors.origins',
        origin,
        'origins such as "https://admin.example.com" (scheme, host, optional port)',
      );
    }
  }
  checkInteger('dashboard.refreshMs', refreshMs, 250, 3_600_000, 'an integer number of milliseconds from 250 to 3600000');
  return { path, token, tokenSource, readOnly, origins: new Set(cors?.origins ?? []), trustProxy, refreshMs };
}

function resolveAuth(path: string, auth: unknown, env: NodeJS.ProcessEnv): { token: string | null; tokenSource: DashboardTokenSource } {
  const production = env.NODE_ENV === 'production';
  if (auth === false) {
    if (production) throw new DashboardAuthDisabledError(path);
    return { token: null, tokenSource: 'none' };
  }
  // A generated token would differ on every replica and live only in this process's log: production needs its own.
  if (auth === undefined) {
    if (production) throw new DashboardAuthRequiredError(path);
    return { token: randomBytes(GENERATED_TOKEN_BYTES).toString('base64url'), tokenSource: 'generated' };
  }
  if (auth === null || typeof auth !== 'object' || typeof (auth as { token?: unknown }).token !== 'string') {
    throw new InvalidOptionError('dashboard.auth', typeof auth, '{ token: "<a secret>" }, or false to turn the token off');
  }
  rejectUnknownKeys('dashboard.auth', { ...auth, token: '<hidden>' }, ['token']);
  const { token } = auth as { token: string };
  // The secret itself never goes into the error: it would end up in logs.
  if (!TOKEN.test(token)) {
    throw new InvalidOptionError(
      'dashboard.auth.token',
      `<hidden, ${token.length} characters>`,
      'a non-empty secret without spaces or line breaks (trim what you read from a file or variable)',
    );
  }
  return { token, tokenSource: 'configured' };
}
