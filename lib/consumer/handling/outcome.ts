/**
 * How an entry ended: not done (a stop cut its retries short), handled, given up (dead-lettered), or
 * parked (`'key'` and `'unordered'` ordering: it waits in its line and comes back through the redelivery
 * tiers; the offset may move past it).
 */
export const ABANDONED = 0;
export const HANDLED = 1;
export const GIVEN_UP = 2;
export const PARKED = 3;
export type Outcome = typeof ABANDONED | typeof HANDLED | typeof GIVEN_UP | typeof PARKED;
