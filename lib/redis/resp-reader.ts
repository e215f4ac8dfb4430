/**
 * A RESP reply, as the read connection needs them: bulk strings as Buffers
 * (views of the socket's chunk where the string lies in one chunk, not
 * copies), arrays (RESP3 maps, sets and pushes read as flat arrays, as
 * ioredis's legacy mapping does), integers and simple strings as strings,
 * nulls as null, and error replies as `RespError`.
 */
export type RespValue = Buffer | string | number | null | Error | RespValue[];

/**
 * How the scalar replies come out. `plain`: simple strings, integers, doubles and big numbers as strings,
 * booleans as '1' and '0', errors as `RespError`. `ioredis`: as ioredis's decoder gives them to its commands
 * (its legacy mapping): simple strings and doubles as Buffers, integers and booleans as numbers, big
 * numbers as strings, errors as what `error` makes.
 */
export interface RespTypes {
  ioredis: boolean;
  error: (message: string) => Error;
  /** Where RESP3 push frames go (pub/sub messages, tracking invalidations); unset, they are replies like any other. */
  onPush?: (frame: RespValue[]) => void;
}

const PLAIN: RespTypes = { ioredis: false, error: (message) => new RespError(message) };

/** An error reply (`-ERR ...`): a value, not a failure of the reader. */
export class RespError extends Error {
  override readonly name = 'ReplyError';
}

/** One array being filled: its items so far, and how many it holds in all. */
interface Frame {
  items: RespValue[];
  length: number;
  /** A RESP3 push frame (`>`): out-of-band data, not the reply of a command. */
  push: boolean;
}

const CR = 13;
const LF = 10;
const MINUS = 45;

/** Type bytes. */
const BULK = 36; // $
const ARRAY = 42; // *
const SIMPLE = 43; // +
const ERROR = 45; // -
const INTEGER = 58; // :
const NULL = 95; // _ (RESP3)
const BOOLEAN = 35; // # (RESP3)
const DOUBLE = 44; // , (RESP3)
const BIG_NUMBER = 40; // ( (RESP3)
const BLOB_ERROR = 33; // ! (RESP3)
const VERBATIM = 61; // = (RESP3)
const MAP = 37; // % (RESP3)
const SET = 126; // ~ (RESP3)
const PUSH = 62; // > (RESP3)
const ATTRIBUTE = 124; // | (RESP3): read and dropped

/**
 * Reads RESP replies from a socket's chunks as they come, however they are
 * cut. It keeps only what a reply still needs: the arrays being filled (a
 * stack, so a chunk boundary anywhere costs nothing but a pause) and the
 * bytes of a bulk string cut by a chunk boundary; nothing already read is
 * scanned again. A bulk string wholly inside one chunk is a view of it: the
 * chunk stays alive as long as one of its strings does.
 *
 * Written for the partition workers' read connections, where ioredis's
 * decoder is most of the client's work (measured in `bench/tools/own-parser-drain.ts`).
 */
export class RespReader {
  private readonly stack: Frame[] = [];
  /** Bytes of a line (`$12\r\n`, `+OK\r\n`) cut by a chunk boundary, with its type byte first. */
  private partialLine?: Buffer;
  /** A bulk string cut by a chunk boundary: what arrived of it, and how many bytes it has in all. */
  private partialBulk?: { parts: Buffer[]; got: number; length: number; error: boolean; dropped: number };
  /** The CRLF after a bulk string still to skip (it may arrive in the next chunk). */
  private skip = 0;

  constructor(
    private readonly onReply: (reply: RespValue) => void,
    private readonly types: RespTypes = PLAIN,
  ) {}

  /** Drops any reply in progress (the connection that carried it closed). */
  reset(): void {
    this.stack.length = 0;
    this.partialLine = this.partialBulk = undefined;
    this.skip = 0;
  }

  /** Reads `chunk`, answering every reply it completes, in order. Throws on bytes that are not RESP. */
  write(chunk: Buffer): void {
    let pos = 0;
    const end = chunk.length;
    while (pos < end) {
      if (this.skip > 0) {
        const n = Math.min(this.skip, end - pos);
        this.skip -= n;
        pos += n;
        continue;
      }
      if (this.partialBulk) {
        const bulk = this.partialBulk;
        const n = Math.min(bulk.length - bulk.got, end - pos);
        bulk.parts.push(chunk.subarray(pos, pos + n));
        bulk.got += n;
        pos += n;
        if (bulk.got < bulk.length) return;
        this.partialBulk = undefined;
        this.skip = 2;
        const bytes = Buffer.concat(bulk.parts, bulk.length).subarray(bulk.dropped);
        this.push(bulk.error ? this.types.error(bytes.toString()) : bytes);
        continue;
      }
      let line: Buffer;
      let from: number;
      let lineEnd: number;
      if (this.partialLine) {
        const before = this.partialLine;
        const lf = lineFeedAfterCr(chunk, pos, before[before.length - 1] === CR);
        if (lf < 0) {
          this.partialLine = Buffer.concat([before, chunk.subarray(pos)]);
          return;
        }
        line = Buffer.concat([before, chunk.subarray(pos, lf + 1)]);
        this.partialLine = undefined;
        pos = lf + 1;
        from = 0;
        lineEnd = line.length - 2; // before CR LF
      } else {
        const lf = lineFeedAfterCr(chunk, pos, false);
        if (lf < 0) {
          this.partialLine = chunk.subarray(pos);
          return;
        }
        line = chunk;
        from = pos;
        lineEnd = lf - 1;
        pos = lf + 1;
      }
      pos = this.readLine(line, from, lineEnd, chunk, pos);
    }
  }

  /**
   * Takes the line at `line[from..lineEnd)` (type byte first); a bulk string's bytes follow in `chunk`
   * from `pos`. Returns where reading goes on in `chunk`.
   */
  private readLine(line: Buffer, from: number, lineEnd: number, chunk: Buffer, pos: number): number {
    const type = line[from];
    switch (type) {
      case BULK:
      case VERBATIM:
      case BLOB_ERROR: {
        const length = readInteger(line, from + 1, lineEnd);
        if (length < 0) {
          this.push(null);
          return pos;
        }
        const error = type === BLOB_ERROR;
        // A verbatim string starts with its format (`txt:`): the string is what follows it.
        const dropped = type === VERBATIM ? 4 : 0;
        if (pos + length + 2 <= chunk.length) {
          const bytes = chunk.subarray(pos + dropped, pos + length);
          this.push(error ? this.types.error(bytes.toString()) : bytes);
          return pos + length + 2;
        }
        const parts = [chunk.subarray(pos)];
        this.partialBulk = { parts, got: chunk.length - pos, length, error, dropped };
        if (this.partialBulk.got >= length) {
          // The string is whole; only (part of) its CRLF is missing.
          this.partialBulk = undefined;
          const bytes = chunk.subarray(pos + dropped, pos + length);
          this.skip = 2 - (chunk.length - pos - length);
          this.push(error ? this.types.error(bytes.toString()) : bytes);
        }
        return chunk.length;
      }
      case ARRAY:
      case SET:
      case PUSH:
      case MAP: {
        let length = readInteger(line, from + 1, lineEnd);
        if (length < 0) {
          this.push(null);
          return pos;
        }
        if (type === MAP) length *= 2;
        const push = type === PUSH && this.stack.length === 0 && this.types.onPush !== undefined;
        if (length === 0) {
          if (push) this.types.onPush?.([]);
          else this.push([]);
        } else this.stack.push({ items: new Array<RespValue>(), length, push });
        return pos;
      }
      case ATTRIBUTE: {
        // Attributes come before the reply they describe: read them as an array and drop it.
        const length = 2 * readInteger(line, from + 1, lineEnd);
        if (length > 0) this.stack.push({ items: [], length: -length, push: false });
        return pos;
      }
      case SIMPLE:
      case DOUBLE:
        // A copy: `line` may be a chunk that is then kept alive by a two-byte reply.
        this.push(this.types.ioredis ? Buffer.from(line.subarray(from + 1, lineEnd)) : line.toString('latin1', from + 1, lineEnd));
        return pos;
      case INTEGER:
        this.push(this.types.ioredis ? readInteger(line, from + 1, lineEnd) : line.toString('latin1', from + 1, lineEnd));
        return pos;
      case BIG_NUMBER:
        this.push(line.toString('latin1', from + 1, lineEnd));
        return pos;
      case BOOLEAN: {
        const truth = line[from + 1] === 116; /* t */
        this.push(this.types.ioredis ? Number(truth) : truth ? '1' : '0');
        return pos;
      }
      case NULL:
        this.push(null);
        return pos;
      case ERROR:
        this.push(this.types.error(line.toString('utf8', from + 1, lineEnd)));
        return pos;
      default:
        throw new Error(`RESP: unknown type byte ${type} (${String.fromCharCode(type)})`);
    }
  }

  /** A value is complete: into the array being filled, or out as a reply. Completes arrays in turn. */
  private push(value: RespValue): void {
    for (;;) {
      const frame = this.stack[this.stack.length - 1];
      if (!frame) {
        this.onReply(value);
        return;
      }
      frame.items.push(value);
      if (frame.items.length < Math.abs(frame.length)) return;
      this.stack.pop();
      // An attribute's array is dropped: the value after it is the reply.
      if (frame.length < 0) return;
      if (frame.push) {
        this.types.onPush?.(frame.items);
        return;
      }
      value = frame.items;
    }
  }
}

/**
 * The index of the first LF at or after `from` that ends a line: one right after a CR (`crBefore`: the
 * byte before `from`, in an earlier chunk, is a CR). A lone LF is part of the line: Redis 7.4 and Valkey 8.0
 * send a Lua error's message with its LFs in it. -1 when the line does not end in `chunk`.
 */
function lineFeedAfterCr(chunk: Buffer, from: number, crBefore: boolean): number {
  let lf = chunk.indexOf(LF, from);
  while (lf >= 0 && !(lf > from ? chunk[lf - 1] === CR : crBefore)) lf = chunk.indexOf(LF, lf + 1);
  return lf;
}

/** The decimal integer in `bytes[from..to)`, with an optional leading minus. */
function readInteger(bytes: Buffer, from: number, to: number): number {
  let negative = false;
  if (bytes[from] === MINUS) {
    negative = true;
    from++;
  }
  if (from >= to) throw new Error('RESP: an empty length');
  let n = 0;
  for (let i = from; i < to; i++) {
    const digit = bytes[i] - 48;
    if (digit < 0 || digit > 9) throw new Error(`RESP: a length that is not a number (${bytes.toString('latin1', from, to)})`);
    n = n * 10 + digit;
  }
  return negative ? -n : n;
}
