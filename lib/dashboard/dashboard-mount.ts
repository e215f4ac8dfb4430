import type { ApplicationConfig } from '@nestjs/core';

/**
 * The URL path the UI is served at: the app's global prefix and the configured `path`. The page's
 * `<base href>` and the logged link come from here, never from the request line, which a client writes
 * as it likes (`GET http://elsewhere/eventrail` is a valid one). A global prefix whose `exclude` list
 * names the dashboard is not seen here.
 */
export function mountedPath(config: ApplicationConfig, path: string): string {
  const prefix = config.getGlobalPrefix().replace(/^\/+|\/+$/g, '');
  return prefix ? `/${prefix}${path}` : path;
}
