import { EventrailError } from './eventrail.error';

/** An archive object being restored is not what retention writes (gzipped JSONL of archived entries). Nothing of it was restored. */
export class ArchiveFormatError extends EventrailError {
  constructor(
    readonly archive: string,
    /** 1-based line number, or 0 when the object as a whole is unreadable. */
    readonly line: number,
    readonly reason: string,
  ) {
    super(`Archive "${archive}"${line > 0 ? ` line ${line}` : ''} cannot be restored: ${reason}`);
  }
}
