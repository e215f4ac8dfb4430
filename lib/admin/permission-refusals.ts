import { RedisPermissionError } from '../errors/redis-permission.error';
import { isRefusal } from '../redis/server-probe';
import { describeError } from '../util/describe-error';

/**
 * Makes each named async method of `prototype` reject with
 * `RedisPermissionError` where Redis refused one of its commands (`NOPERM`,
 * an unknown command), instead of the bare reply error: a read-only
 * dashboard or CLI user that tries a write gets an error that says so.
 * Every other error passes through unchanged.
 */
export function typeRefusals<T extends object>(prototype: T, operations: Partial<Record<keyof T & string, string>>): void {
  for (const [method, operation] of Object.entries(operations) as Array<[keyof T & string, string]>) {
    const original = prototype[method] as unknown as (...args: unknown[]) => Promise<unknown>;
    Object.defineProperty(prototype, method, {
      configurable: true,
      writable: true,
      value: async function (this: T, ...args: unknown[]): Promise<unknown> {
        try {
          return await original.apply(this, args);
        } catch (error) {
          const reply = describeError(error);
          throw isRefusal(reply) ? new RedisPermissionError(operation, reply) : error;
        }
      },
    });
  }
}
