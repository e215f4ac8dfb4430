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
