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
