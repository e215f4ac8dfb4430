/** Counters of one group in this process since it started; read through `EventrailConsumers.stats()`. */
export interface GroupStats {
  /** Entries whose handlers all succeeded. */
  handled: number;
  /** Entries given up and written to the dead-letter stream. */
  deadLettered: number;
  /** Entries skipped because idempotency found their event id already done. */
  skippedDuplicates: number;
  /** Entries parked (`'key'` and `'unordered'` ordering only): failed heads and the messages parked behind them. */
  parked?: number;
}

export function newGroupStats(parking = false): GroupStats {
  return parking ? { handled: 0, deadLettered: 0, skippedDuplicates: 0, parked: 0 } : { handled: 0, deadLettered: 0, skippedDuplicates: 0 };
}
