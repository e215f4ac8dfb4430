/**
 * Big entries, as the append scripts tell them (redis/scripts/index-big.lua,
 * whose constants these mirror): an entry is big when its field names and
 * values, `FRAME_BYTES` for each field and for the id, and the longest id
 * there is weigh more than `BIG_ENTRY_BYTES`. The scripts that append record
 * each big entry's id in the partition's index, so a worker that is behind
 * reads plain XRANGE between them, `maxReadBytes / BIG_ENTRY_BYTES` entries
 * at a time at most, and knows before it reads that the reply fits.
 */
export const BIG_ENTRY_BYTES = 16_384;
/** What a field (or the id) costs in a reply beyond its bytes: a RESP bulk string's header and end, about. */
export const FRAME_BYTES = 8;
/** The longest stream id: two 64-bit numbers and a dash. */
const ID_BYTES = 41;

/**
 * Whether the entry of these XADD field arguments is big. Cheap for the
 * usual entry: a string's UTF-16 length times 3 bounds its UTF-8 bytes, so
 * the bytes are counted only for entries near the line.
 */
export function isBigEntry(fields: readonly string[]): boolean {
  return isBigSpan(fields, 0, fields.length);
}

/**
 * The big events of a run, as the run scripts take them (appendMany-n and
 * appendManyDedup-n weigh nothing themselves): their ordinals in the run (1
 * for the first), separated by commas, or '' for none. `events` is packed as
 * those scripts take it: with a `width`, every event's `width` field
 * arguments back to back; with 0, each event's count of them, then they.
 */
export function bigOrdinals(events: ReadonlyArray<string | number>, width: number): string {
  let list = '';
  let ordinal = 0;
  for (let i = 0; i < events.length;) {
    const count = width > 0 ? width : Number(events[i++]);
    // A malformed count: the script refuses the run, whatever this says.
    if (!Number.isInteger(count) || count < 0) break;
    ordinal++;
    if (isBigSpan(events, i, i + count)) list += list === '' ? String(ordinal) : `,${ordinal}`;
    i += count;
  }
  return list;
}

/** Whether the field arguments `values[from..to)` (numbers as Redis receives them: their decimal text) make a big entry. */
function isBigSpan(values: ReadonlyArray<string | number>, from: number, to: number): boolean {
  const frames = ID_BYTES + FRAME_BYTES * (to - from + 1);
  let most = frames;
  for (let i = from; i < to; i++) most += 3 * text(values[i]).length;
  if (most <= BIG_ENTRY_BYTES) return false;
  let bytes = frames;
  for (let i = from; i < to; i++) bytes += Buffer.byteLength(text(values[i]));
  return bytes > BIG_ENTRY_BYTES;
}

function text(value: string | number | undefined): string {
  return typeof value === 'string' ? value : String(value);
}
