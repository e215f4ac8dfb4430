/**
 * Where archive objects go. `put` resolves only once the object is stored
 * whole and checked; retention trims nothing a `put` did not confirm.
 */
export interface ArchiveSink {
  /** Names the destination in the per-partition archive marks, e.g. `fs:/var/archive` or `s3:bucket/prefix`. */
  readonly id: string;
  /** Stores `body` under `name` (replacing an object of that name) and verifies it. */
  put(name: string, body: Buffer): Promise<void>;
  /** Names of the archive objects under `prefix` (such as `eventrail/`), in no particular order. */
  list(prefix: string): Promise<string[]>;
  get(name: string): Promise<Buffer>;
  close(): void;
}
