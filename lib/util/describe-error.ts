/**
 * The message of anything thrown, for a log line or an error of our own:
 * code may throw values that are not `Error`s. Producers' text can be in it,
 * so a log line that shows it goes through `escapeControls`.
 */
export function describeError(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
