/**
 * The message of anything thrown, for a log line or an error of our own:
 * code may throw values that are not `Error`s. Producers' text can be in it,
 * so a log line that shows it goes through `escapeControls`.
 */
export function describeError(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/** The stack of anything thrown, for `Logger.error`'s second argument; undefined for a non-`Error`. */
export function errorStack(error: unknown): string | undefined {
  return error instanceof Error ? error.stack : undefined;
}
