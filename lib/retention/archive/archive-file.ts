import { promisify } from 'node:util';
import { gunzip, gzip } from 'node:zlib';
import { ArchiveFormatError } from '../../errors/archive-format.error';
import type { ArchiveObject } from '../../admin/operations.types';
import { compareStreamIds } from '../../wire/stream-id';
import { describeError } from '../../util/describe-error';

/**
 * The archive format: one gzipped JSONL object per range of consecutive
 * entries of a partition, named by the range, so the same range always gets
 * the same name (writing it again replaces it instead of adding a copy).
 * Each line is `{"partition":0,"id":"<stream id>","fields":{"event":...}}`.
 */
export interface ArchivedEntry {
  partition: number;
  /** Stream id the entry had in the log. */
  id: string;
  /** Its fields as they were appended (`id`, `event`, `key`, `time`, `data`, `headers`, `to`). */
  fields: Record<string, string>;
}

/**
 * Most bytes one archive object may inflate to when it is restored, so a gzip
 * bomb (or a damaged object) fails with `ArchiveFormatError` instead of taking
 * the process's memory: decoding holds the bytes, their text and the parsed
 * entries at once. The default `maxEntriesPerObject` (10 000) stays under it
 * while entries average under about 25 KiB; lower `maxEntriesPerObject` for
 * bigger events. (Past 512 MiB an object cannot be decoded anyway: it no longer
 * fits one JavaScript string.)
 */
export const MAX_ARCHIVE_OBJECT_BYTES = 256 * 1024 * 1024;

const gzipAsync = promisify(gzip);
const gunzipAsync = promisify(gunzip) as (body: Buffer, options: { maxOutputLength: number }) => Promise<Buffer>;
const STREAM_ID = '\\d{1,20}-\\d{1,20}';
const NAME = new RegExp(`^(?:(.+)/)?p(\\d{1,4})/(${STREAM_ID})_(${STREAM_ID})\\.jsonl\\.gz$`);

/** `<prefix>/p<partition>/<firstId>_<lastId>.jsonl.gz` */
export function archiveName(prefix: string, partition: number, firstId: string, lastId: string): string {
  return `${prefix}/p${partition}/${firstId}_${lastId}.jsonl.gz`;
}

/** The parts of an archive name, or null when `name` is not one (also keeps restores inside the archive). */
export function parseArchiveName(name: string): (ArchiveObject & { prefix: string }) | null {
  const match = NAME.exec(name);
  if (!match || name.split('/').some((part) => part === '..' || part === '.' || part === '')) return null;
  return { name, prefix: match[1] ?? '', partition: Number(match[2]), firstId: match[3], lastId: match[4] };
}

/**
 * Entries as XRANGE returns them, to the gzipped JSONL of one archive object.
 * Refuses to make an object bigger than restore reads (`maxBytes`): retention
 * then trims nothing, rather than trim entries into an archive that cannot be
 * restored.
 */
export async function encodeArchive(
  partition: number,
  entries: ReadonlyArray<[string, string[]]>,
  maxBytes = MAX_ARCHIVE_OBJECT_BYTES,
): Promise<Buffer> {
  const lines = entries.map(([id, flat]) => {
    const fields: Record<string, string> = {};
    for (let i = 0; i + 1 < flat.length; i += 2) fields[flat[i]] = flat[i + 1];
    return JSON.stringify({ partition, id, fields });
  });
  const text = Buffer.from(`${lines.join('\n')}\n`, 'utf8');
  if (text.length > maxBytes) {
    throw new Error(
      `${entries.length} entries of partition ${partition} make ${text.length} bytes, over the ${maxBytes} an archive object may hold; lower retention.archive.maxEntriesPerObject`,
    );
  }
  return gzipAsync(text);
}

/**
 * Reads an archive object back. Given the object (as `parseArchiveName` reads
 * its name), it also checks the entries against the name: every one of the
 * name's partition, in strictly increasing id order, the first and last ids
 * those of the name (a bare name checks the lines only). `ArchiveFormatError`
 * names the object and the first line that is wrong; nothing past `maxBytes`
 * is inflated.
 */
export async function decodeArchive(
  source: string | ArchiveObject,
  body: Buffer,
  maxBytes = MAX_ARCHIVE_OBJECT_BYTES,
): Promise<ArchivedEntry[]> {
  const object = typeof source === 'string' ? undefined : source;
  const name = typeof source === 'string' ? source : source.name;
  let text: string;
  try {
    text = (await gunzipAsync(body, { maxOutputLength: maxBytes })).toString('utf8');
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ERR_BUFFER_TOO_LARGE') {
      throw new ArchiveFormatError(name, 0, `inflates past ${maxBytes} bytes, the most an archive object may hold`);
    }
    throw new ArchiveFormatError(name, 0, `not gzip (${describeError(error)})`);
  }
  const entries: ArchivedEntry[] = [];
  const lines = text.split('\n');
  let last = 0;
  for (let i = 0; i < lines.length; i++) {
    if (lines[i] === '') continue;
    let value: unknown;
    try {
      value = JSON.parse(lines[i]);
    } catch {
      throw new ArchiveFormatError(name, i + 1, 'not JSON');
    }
    const entry = checkEntry(name, i + 1, value);
    if (object) checkPlace(object, i + 1, entry, entries.at(-1));
    entries.push(entry);
    last = i + 1;
  }
  if (object) checkEnd(object, last, entries.at(-1));
  return entries;
}

/** The object ends where its name says (`line` is the line of `final`). */
function checkEnd({ name, firstId, lastId }: ArchiveObject, line: number, final: ArchivedEntry | undefined): void {
  if (final === undefined) throw new ArchiveFormatError(name, 0, `has no entries, but its name says ${firstId} to ${lastId}`);
  if (compareStreamIds(final.id, lastId) !== 0) {
    throw new ArchiveFormatError(name, line, `the last entry is ${final.id}, but the name says ${lastId}`);
  }
}

/** An entry belongs where the name puts it: its partition, after the entry before it, within the name's range. */
function checkPlace(object: ArchiveObject, line: number, entry: ArchivedEntry, previous: ArchivedEntry | undefined): void {
  const { name, partition, firstId, lastId } = object;
  if (entry.partition !== partition) {
    throw new ArchiveFormatError(name, line, `entry ${entry.id} is of partition ${entry.partition}, but the name says ${partition}`);
  }
  if (previous === undefined && compareStreamIds(entry.id, firstId) !== 0) {
    throw new ArchiveFormatError(name, line, `the first entry is ${entry.id}, but the name says ${firstId}`);
  }
  if (previous !== undefined && compareStreamIds(entry.id, previous.id) <= 0) {
    throw new ArchiveFormatError(name, line, `entry ${entry.id} does not come after ${previous.id}`);
  }
  if (compareStreamIds(entry.id, lastId) > 0) {
    throw new ArchiveFormatError(name, line, `entry ${entry.id} is past ${lastId}, the last id the name says`);
  }
}

function checkEntry(name: string, line: number, value: unknown): ArchivedEntry {
  const entry = value as Partial<ArchivedEntry> | null;
  if (entry === null || typeof entry !== 'object') throw new ArchiveFormatError(name, line, 'not an object');
  if (typeof entry.partition !== 'number' || !Number.isInteger(entry.partition) || entry.partition < 0) {
    throw new ArchiveFormatError(name, line, '"partition" is not a partition number');
  }
  if (typeof entry.id !== 'string' || !new RegExp(`^${STREAM_ID}$`).test(entry.id)) {
    throw new ArchiveFormatError(name, line, '"id" is not a stream id');
  }
  const fields = entry.fields;
  if (fields === null || typeof fields !== 'object' || Array.isArray(fields) || Object.values(fields).some((v) => typeof v !== 'string')) {
    throw new ArchiveFormatError(name, line, '"fields" is not an object of strings');
  }
  return { partition: entry.partition, id: entry.id, fields };
}
