import { promisify } from 'node:util';
import { gunzip, gzip } from 'node:zlib';
import { ArchiveFormatError } from '../../errors/archive-format.error';
import type { ArchiveObject } from '../../eventrail.types';
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

const gzipAsync = promisify(gzip);
const gunzipAsync = promisify(gunzip);
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

/** Entries as XRANGE returns them, to the gzipped JSONL of one archive object. */
export async function encodeArchive(partition: number, entries: ReadonlyArray<[string, string[]]>): Promise<Buffer> {
  const lines = entries.map(([id, flat]) => {
    const fields: Record<string, string> = {};
    for (let i = 0; i + 1 < flat.length; i += 2) fields[flat[i]] = flat[i + 1];
    return JSON.stringify({ partition, id, fields });
  });
  return gzipAsync(Buffer.from(`${lines.join('\n')}\n`, 'utf8'));
}

/** Reads an archive object back; `ArchiveFormatError` names the first line that is not an archived entry. */
export async function decodeArchive(name: string, body: Buffer): Promise<ArchivedEntry[]> {
  let text: string;
  try {
    text = (await gunzipAsync(body)).toString('utf8');
  } catch (error) {
    throw new ArchiveFormatError(name, 0, `not gzip (${describeError(error)})`);
  }
  const entries: ArchivedEntry[] = [];
  const lines = text.split('\n');
  for (let i = 0; i < lines.length; i++) {
    if (lines[i] === '') continue;
    let value: unknown;
    try {
      value = JSON.parse(lines[i]);
    } catch {
      throw new ArchiveFormatError(name, i + 1, 'not JSON');
    }
    entries.push(checkEntry(name, i + 1, value));
  }
  return entries;
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
