import type { FactoryProvider, ModuleMetadata } from '@nestjs/common';
import { DashboardAuthRequiredError } from '../errors/dashboard-auth-required.error';
import { InvalidOptionError } from '../errors/invalid-option.error';
import { checkBoolean, checkInteger, checkObject } from '../util/option-checks';

export interface EventrailDashboardOptions {
  /**
   * Where the UI is served; the JSON API is under `<path>/api/`. Relative to the app's global prefix, if any.
   * @default '/eventrail'
   */
  path?: string;
  /**
   * Bearer token that every API call must present (`Authorization: Bearer <token>`), compared in constant time.
   * Required when `NODE_ENV` is `production`: startup fails without it there. Without it, the API only
   * answers requests addressed to a loopback host (`localhost`, `127.0.0.1`, `[::1]`).
   */
  auth?: { token: string };
  /**
   * Hide every write control in the UI and refuse every write call (replay, purge) with 403.
   * @default false
   */
  readOnly?: boolean;
  /** Origins allowed to call the API from another site (CORS). None by default: same origin only. */
  cors?: { origins: string[] };
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

export interface ResolvedDashboardOptions {
  path: string;
  token: string | null;
  readOnly: boolean;
  origins: ReadonlySet<string>;
  refreshMs: number;
}

export const DASHBOARD_DEFAULTS = Object.freeze({ path: '/eventrail', readOnly: false, refreshMs: 2000 });

const PATH = /^(\/[A-Za-z0-9._~-]+)+$/;
const ORIGIN = /^https?:\/\/[^/\s]+$/;
/** What a bearer header can carry: a token with whitespace could never be presented. */
const TOKEN = /^\S+$/;

/** The mount path, checked: routes are built from it before the options factory of `registerAsync` runs. */
export function resolveDashboardPath(path: unknown = DASHBOARD_DEFAULTS.path): string {
  if (typeof path !== 'string' || !PATH.test(path)) {
    throw new InvalidOptionError('dashboard.path', path, 'a URL path such as "/eventrail" (no trailing slash)');
  }
  return path;
}

/** Applies defaults and checks every option once; throws `InvalidOptionError` or `DashboardAuthRequiredError`. */
export function resolveDashboardOptions(
  options: EventrailDashboardOptions,
  env: NodeJS.ProcessEnv = process.env,
): ResolvedDashboardOptions {
  checkObject('dashboard', options, 'an options object');
  const path = resolveDashboardPath(options.path);
  const { auth, readOnly = DASHBOARD_DEFAULTS.readOnly, cors, refreshMs = DASHBOARD_DEFAULTS.refreshMs } = options;
  if (auth !== undefined && (auth === null || typeof auth !== 'object' || typeof auth.token !== 'string')) {
    throw new InvalidOptionError('dashboard.auth', typeof auth, '{ token: "<a secret>" }');
  }
  // The secret itself never goes into the error: it would end up in logs.
  if (auth !== undefined && !TOKEN.test(auth.token)) {
    throw new InvalidOptionError(
      'dashboard.auth.token',
      `<hidden, ${auth.token.length} characters>`,
      'a non-empty secret without spaces or line breaks (trim what you read from a file or variable)',
    );
  }
  const token = auth?.token ?? null;
  if (token === null && env.NODE_ENV === 'production') throw new DashboardAuthRequiredError(path);
  checkBoolean('dashboard.readOnly', readOnly);
  if (cors !== undefined && (cors === null || typeof cors !== 'object' || !Array.isArray(cors.origins))) {
    throw new InvalidOptionError('dashboard.cors', cors, '{ origins: ["https://admin.example.com"] }');
  }
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
  return { path, token, readOnly, origins: new Set(cors?.origins ?? []), refreshMs };
}
