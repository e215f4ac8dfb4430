/**
 * Settles like `work`, unless `ms` pass first: then like `onTimeout()`, which
 * returns the value to resolve with or throws the error to reject with. The
 * timer is cleared either way, and a late rejection of `work` is absorbed by
 * the race, so nothing is left unhandled.
 */
export async function withTimeout<T, F = never>(work: PromiseLike<T>, ms: number, onTimeout: () => F): Promise<T | F> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<F>((resolve, reject) => {
    timer = setTimeout(() => {
      try {
        resolve(onTimeout());
      } catch (error) {
        reject(error);
      }
    }, ms);
  });
  try {
    return await Promise.race([work, late]);
  } finally {
    clearTimeout(timer);
  }
}
