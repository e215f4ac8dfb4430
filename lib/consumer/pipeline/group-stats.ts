/** Counters of one group in this process since it started; read through `EventrailConsumers.stats()`. */
export interface GroupStats {
  /** Entries whose handlers all succeeded. */
  handled: number;
  /** Entries given up and written to the dead-letter stream. */
  deadLettered: number;
  /** Entries skipped because idempotency found their event id already done. */
  skippedDuplicates: number;
}

export function newGroupStats(): GroupStats {
  return { handled: 0, deadLettered: 0, skippedDuplicates: 0 };
}
