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
  let most = ID_BYTES + FRAME_BYTES * (fields.length + 1);
  for (let i = 0; i < fields.length; i++) most += 3 * fields[i].length;
  if (most <= BIG_ENTRY_BYTES) return false;
  let bytes = ID_BYTES + FRAME_BYTES * (fields.length + 1);
  for (let i = 0; i < fields.length; i++) bytes += Buffer.byteLength(fields[i]);
  return bytes > BIG_ENTRY_BYTES;
}
