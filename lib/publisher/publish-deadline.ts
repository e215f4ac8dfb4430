/**
 * Settles like `work`, unless `ms` pass first: then like `onTimeout()`
 * (its value, or the error it throws). One promise and one timer per call,
 * cleared when `work` settles: it sits on every publish, so it is leaner
 * than `withTimeout`'s race. A late settlement of `work` is absorbed.
 */
export function withDeadline<T>(work: Promise<T>, ms: number, onTimeout: () => T): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const timer = setTimeout(() => {
      try {
        resolve(onTimeout());
      } catch (error) {
        reject(error);
      }
    }, ms);
    work.then(
      (value) => {
        clearTimeout(timer);
        resolve(value);
      },
      (error: unknown) => {
        clearTimeout(timer);
        reject(error);
      },
    );
  });
}
