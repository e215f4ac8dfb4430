/** How an entry ended: not done (a stop cut its retries short), handled, or given up (dead-lettered). */
export const ABANDONED = 0;
export const HANDLED = 1;
export const GIVEN_UP = 2;
export type Outcome = typeof ABANDONED | typeof HANDLED | typeof GIVEN_UP;
