import { EventrailError } from './eventrail.error';

/** Redis's reply to a command that may grow memory while it is over `maxmemory` (with `noeviction`). */
const OUT_OF_MEMORY = /^(?:EXECABORT .*: )?OOM\b|OOM command not allowed/;

/**
 * Redis is over its `maxmemory` and refused a command this operation needs
 * (Redis's `OOM` reply): it refuses every write that may grow memory until
 * something is freed. What frees memory still runs on a full Redis (a
 * retention cycle, `purgeDeadLetters`, `pruneStaleGroups`, `deleteGroup`);
 * what would add to it (a replay, a restore, a publish) fails with this.
 * Nothing was changed by the refused command.
 */
export class RedisFullError extends EventrailError {
  constructor(
    /** What was attempted (`replay dead letters`, `take the retention lock`, ...). */
    readonly operation: string,
    /** Redis's reply, such as `OOM command not allowed when used memory > 'maxmemory'.` */
    readonly reply: string,
    /** What else to do, when there is more to say than the runbook's "Redis is full". */
    private readonly hint = 'free memory first (run retention, purge dead letters, prune stale groups) or raise maxmemory; see "Redis full or down" in docs/operations/runbook.md',
    /**
     * For an operation that goes in steps, how many of its items went through
     * before the refusal (a dead-letter replay: the letters replayed, which
     * left the dead-letter stream; 0 when it was refused at its start, and the
     * message says nothing of it then); undefined for an operation of one step.
     */
    readonly done?: number,
  ) {
    super(
      `Redis is full (used memory over maxmemory) and refused to ${operation}${done ? ` after ${done} went through` : ''}: ${reply.trim()}. ${hint}`,
    );
  }

  /** True when `error` is Redis's OOM reply (also inside an aborted MULTI or a script). */
  static isOutOfMemory(error: unknown): boolean {
    const message = (error as { message?: unknown } | null)?.message;
    return typeof message === 'string' && OUT_OF_MEMORY.test(message);
  }

  /**
   * `error` as a `RedisFullError` for `operation` when it is Redis's OOM reply, else `error` itself;
   * `done`: see the property.
   */
  static from(operation: string, error: unknown, done?: number): unknown {
    if (error instanceof RedisFullError || !RedisFullError.isOutOfMemory(error)) return error;
    return new RedisFullError(operation, (error as Error).message, undefined, done);
  }

  /** This refusal with `count` more items counted as gone through before it (the steps an operation finished first). */
  after(count: number): RedisFullError {
    if (count === 0) return this;
    return new RedisFullError(this.operation, this.reply, this.hint, (this.done ?? 0) + count);
  }
}
