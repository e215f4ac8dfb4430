import { entryOrReason, type EntryOrigin, type MalformedEntry, type RawEntry } from './codec';

/**
 * `readEntry` over entries that arrive as bytes, with the same result for the
 * same bytes: ioredis would otherwise turn every bulk string of a reply into
 * a string. Field names (3 of a keyed entry's 7 strings) are told apart by
 * their bytes and never become strings, the stream id is read as Latin-1
 * (digits and a dash), and only values become strings (UTF-8, decoded as
 * ioredis decodes them). A malformed entry keeps all of its fields, as
 * strings, exactly as `readEntry` would have been given them.
 */

// Which of the wire format's fields a name is (see `FIELD` in codec.ts).
const UNKNOWN = 0;
const ID = 1;
const EVENT = 2;
const KEY = 3;
const TIME = 4;
const DATA = 5;
const HEADERS = 6;
const TO = 7;

/** Buffer's own decoders, which `toString` calls once it has checked its arguments; public on every Node this supports. */
interface Slicers {
  utf8Slice?(start: number, end: number): string;
  latin1Slice?(start: number, end: number): string;
}
const SLICERS = Buffer.prototype as Slicers;
const DIRECT = typeof SLICERS.utf8Slice === 'function' && typeof SLICERS.latin1Slice === 'function';

/** `bytes[start, end)` as UTF-8 (invalid bytes replaced, as ioredis decodes them); callers have checked the bounds. */
function utf8(bytes: Buffer, start: number, end: number): string {
  return DIRECT ? (bytes as Buffer & Required<Slicers>).utf8Slice(start, end) : bytes.toString('utf8', start, end);
}

function latin1(bytes: Buffer, start: number, end: number): string {
  return DIRECT ? (bytes as Buffer & Required<Slicers>).latin1Slice(start, end) : bytes.toString('latin1', start, end);
}

/** The values of the wire format's fields found in one entry; reset before each. */
class FoundFields {
  id: string | undefined = undefined;
  event: string | undefined = undefined;
  key: string | null = null;
  time: string | undefined = undefined;
  data: string | undefined = undefined;
  headers: string | undefined = undefined;
  to: string | undefined = undefined;

  reset(): void {
    this.id = this.event = this.time = this.data = this.headers = this.to = undefined;
    this.key = null;
  }

  /** Keeps the value at `bytes[start, end)` if `field` is one of the format's; the last one of a name wins, as in `readEntry`. */
  set(field: number, bytes: Buffer, start: number, end: number): void {
    switch (field) {
      case ID:
        this.id = utf8(bytes, start, end);
        break;
      case EVENT:
        this.event = utf8(bytes, start, end);
        break;
      case KEY:
        this.key = utf8(bytes, start, end);
        break;
      case TIME:
        this.time = utf8(bytes, start, end);
        break;
      case DATA:
        this.data = utf8(bytes, start, end);
        break;
      case HEADERS:
        this.headers = utf8(bytes, start, end);
        break;
      case TO:
        this.to = utf8(bytes, start, end);
        break;
    }
  }

  /** The entry these values make, or why it is malformed (`entryOrReason`). */
  result(offset: string, origin: EntryOrigin): RawEntry | string {
    return entryOrReason(offset, this.id, this.event, this.key, this.time, this.data, this.headers, this.to, origin);
  }
}

const found = new FoundFields();

/** One entry of an `xreadBuffer` reply: its id and its fields, each a Buffer. */
export function readEntryBuffers(offsetBytes: Buffer, fields: Buffer[], origin: EntryOrigin): RawEntry | MalformedEntry {
  const offset = latin1(offsetBytes, 0, offsetBytes.length);
  found.reset();
  for (let i = 0; i + 1 < fields.length; i += 2) {
    const name = fields[i];
    const value = fields[i + 1];
    found.set(fieldOf(name, 0, name.length), value, 0, value.length);
  }
  const entry = found.result(offset, origin);
  return typeof entry === 'string' ? { offset, fields: fields.map((f) => f.toString()), reason: entry, to: found.to } : entry;
}

/**
 * The entries `readBacklog-1.lua` packed with Redis's `cmsgpack`: an array of
 * `[id, [name, value, ...]]`, as XRANGE answers, every string a MessagePack
 * str. Read in place, without a string per field name. Throws on anything
 * else (it is a read error then, and the read is retried).
 */
export function readPackedEntries(packed: Buffer, origin: EntryOrigin): Array<RawEntry | MalformedEntry> {
  const cursor = new PackCursor(packed);
  const count = cursor.array();
  const entries = new Array<RawEntry | MalformedEntry>(count);
  for (let e = 0; e < count; e++) {
    if (cursor.array() !== 2) throw new PackedReplyError(cursor.at, 'an entry that is not [id, fields]');
    const idLength = cursor.string();
    const offset = latin1(packed, cursor.at, cursor.at + idLength);
    cursor.at += idLength;
    const fieldCount = cursor.array();
    const fieldsAt = cursor.at;
    found.reset();
    for (let i = 0; i < fieldCount; i++) {
      const nameLength = cursor.string();
      const nameAt = cursor.at;
      cursor.at += nameLength;
      if (++i === fieldCount) break; // a name without a value: readEntry ignores it too
      const valueLength = cursor.string();
      found.set(fieldOf(packed, nameAt, nameLength), packed, cursor.at, cursor.at + valueLength);
      cursor.at += valueLength;
    }
    const entry = found.result(offset, origin);
    entries[e] =
      typeof entry === 'string' ? { offset, fields: packedStrings(packed, fieldsAt, fieldCount), reason: entry, to: found.to } : entry;
  }
  if (cursor.at !== packed.length) throw new PackedReplyError(cursor.at, 'bytes after the last entry');
  return entries;
}

/** Every field of a malformed packed entry, as a string. */
function packedStrings(packed: Buffer, at: number, count: number): string[] {
  const cursor = new PackCursor(packed);
  cursor.at = at;
  const strings = new Array<string>(count);
  for (let i = 0; i < count; i++) {
    const length = cursor.string();
    strings[i] = utf8(packed, cursor.at, cursor.at + length);
    cursor.at += length;
  }
  return strings;
}

/**
 * The field the name at `bytes[at, at + length)` is: by its length, then
 * every byte (spelt out: this runs for every field of every entry read);
 * `UNKNOWN` for any other name.
 */
function fieldOf(b: Buffer, at: number, length: number): number {
  switch (length) {
    case 2: // id, to
      if (b[at] === 0x69) return b[at + 1] === 0x64 ? ID : UNKNOWN;
      return b[at] === 0x74 && b[at + 1] === 0x6f ? TO : UNKNOWN;
    case 3: // key
      return b[at] === 0x6b && b[at + 1] === 0x65 && b[at + 2] === 0x79 ? KEY : UNKNOWN;
    case 4: // data, time
      if (b[at] === 0x64) return b[at + 1] === 0x61 && b[at + 2] === 0x74 && b[at + 3] === 0x61 ? DATA : UNKNOWN;
      return b[at] === 0x74 && b[at + 1] === 0x69 && b[at + 2] === 0x6d && b[at + 3] === 0x65 ? TIME : UNKNOWN;
    case 5: // event
      return b[at] === 0x65 && b[at + 1] === 0x76 && b[at + 2] === 0x65 && b[at + 3] === 0x6e && b[at + 4] === 0x74 ? EVENT : UNKNOWN;
    case 7: // headers
      return b[at] === 0x68 &&
        b[at + 1] === 0x65 &&
        b[at + 2] === 0x61 &&
        b[at + 3] === 0x64 &&
        b[at + 4] === 0x65 &&
        b[at + 5] === 0x72 &&
        b[at + 6] === 0x73
        ? HEADERS
        : UNKNOWN;
    default:
      return UNKNOWN;
  }
}

/** A packed reply that is not what readBacklog-1.lua sends. */
class PackedReplyError extends Error {
  constructor(at: number, what: string) {
    super(`Packed backlog read: ${what} at byte ${at}`);
    this.name = 'PackedReplyError';
  }
}

/**
 * Walks the MessagePack that `cmsgpack.pack` makes of XRANGE's answer: arrays
 * (fixarray, array 16, array 32) and strings (fixstr, str 8/16/32, and bin
 * 8/16/32 for good measure). Each read checks that what it announces fits.
 */
class PackCursor {
  at = 0;

  constructor(private readonly bytes: Buffer) {}

  /** Reads an array header; the element count. */
  array(): number {
    const type = this.bytes[this.at];
    let count: number;
    if (type >= 0x90 && type <= 0x9f) count = this.header(1, type & 0x0f);
    else if (type === 0xdc) count = this.header(3, this.bytes.readUInt16BE(this.at + 1));
    else if (type === 0xdd) count = this.header(5, this.bytes.readUInt32BE(this.at + 1));
    else throw new PackedReplyError(this.at, `type ${hex(type)} where an array was expected`);
    // Every element takes a byte at least: a count past the end is a broken reply, not an allocation to make.
    if (count > this.bytes.length - this.at) throw new PackedReplyError(this.at, 'an array longer than the reply');
    return count;
  }

  /** Reads a string header; the string's length in bytes (it starts at `at`, and is there). */
  string(): number {
    const type = this.bytes[this.at];
    let length: number;
    if (type >= 0xa0 && type <= 0xbf) length = this.header(1, type & 0x1f);
    else if (type === 0xd9 || type === 0xc4) length = this.header(2, this.bytes[this.at + 1]);
    else if (type === 0xda || type === 0xc5) length = this.header(3, this.bytes.readUInt16BE(this.at + 1));
    else if (type === 0xdb || type === 0xc6) length = this.header(5, this.bytes.readUInt32BE(this.at + 1));
    else throw new PackedReplyError(this.at, `type ${hex(type)} where a string was expected`);
    if (!(length <= this.bytes.length - this.at)) throw new PackedReplyError(this.at, 'a string cut short');
    return length;
  }

  /** Moves past a header of `size` bytes (which must all be there) that announces `value`. */
  private header(size: number, value: number): number {
    if (this.at + size > this.bytes.length) throw new PackedReplyError(this.at, 'a header cut short');
    this.at += size;
    return value;
  }
}

function hex(type: number | undefined): string {
  return type === undefined ? 'the end' : `0x${type.toString(16).padStart(2, '0')}`;
}
