import type { MalformedEntry, RawEntry } from '../wire/codec';

/** An entry to deliver again (from a dead letter or an archive), and the partition it goes back to. */
export interface Redelivery {
  partition: number;
  entry: RawEntry | MalformedEntry;
}

/** Why events are appended again: a dead-letter replay, or an archive restore. */
export type RedeliveryKind = 'replay' | 'restore';
