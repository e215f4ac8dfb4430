/**
 * Loads an optional peer dependency (`load` is `() => import('name')`, so the
 * types and the package name stay at the call site). When the package is not
 * installed, throws what `missing` builds, which should say what to install;
 * any other failure of the import propagates as it is.
 */
export async function importOptionalPeer<T>(load: () => Promise<T>, missing: (error: unknown) => Error): Promise<T> {
  try {
    return await load();
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'MODULE_NOT_FOUND' || code === 'ERR_MODULE_NOT_FOUND') throw missing(error);
    throw error;
  }
}

/**
 * The synchronous form, for a peer that is used when it is there and simply
 * skipped when it is not (OpenTelemetry): `load` is `() => require('name')`,
 * called on first use rather than when this library is loaded. Undefined when
 * the package is not installed; any other failure propagates.
 */
export function requireOptionalPeer<T>(load: () => T): T | undefined {
  try {
    return load();
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'MODULE_NOT_FOUND') return undefined;
    throw error;
  }
}
