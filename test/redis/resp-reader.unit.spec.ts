import { RespError, RespReader, RespValue } from '../../lib/redis/resp-reader';
import { seededRandom as seeded } from '../support/seeded-random';

type Model = { bulk: Buffer } | { simple: string } | { int: number } | { error: string } | { nil: true } | { array: Model[] };

function generate(random: () => number, depth = 0): Model {
  const r = random();
  if (depth < 3 && r < 0.3) {
    const n = Math.floor(random() * (depth === 0 ? 40 : 8));
    return { array: Array.from({ length: n }, () => generate(random, depth + 1)) };
  }
  if (r < 0.75) {
    const size = random() < 0.1 ? Math.floor(random() * 5000) : Math.floor(random() * 40);
    // Any bytes, CR and LF included: a bulk string is read by its length.
    return {
      bulk: Buffer.from(Array.from({ length: size }, () => (random() < 0.1 ? 13 : random() < 0.1 ? 10 : Math.floor(random() * 256)))),
    };
  }
  if (r < 0.82) return { simple: `OK${Math.floor(random() * 1000)}${strayLineBytes(random)}` };
  if (r < 0.9) return { int: Math.floor((random() - 0.5) * 1e9) };
  // Redis 7.4 and Valkey 8.0 send a Lua error's message with its LFs in it: a line ends at CR LF only.
  if (r < 0.95) return { error: `ERR something ${strayLineBytes(random)}${Math.floor(random() * 100)}` };
  return { nil: true };
}

/** Lone LFs and CRs (never CR LF) for a line's text, or nothing. */
function strayLineBytes(random: () => number): string {
  if (random() < 0.5) return '';
  return Array.from({ length: 1 + Math.floor(random() * 4) }, () => (random() < 0.5 ? 'a\nb' : random() < 0.5 ? 'c\rd' : '\n\n')).join('');
}

function encode(model: Model): Buffer {
  if ('bulk' in model) return Buffer.concat([Buffer.from(`$${model.bulk.length}\r\n`), model.bulk, Buffer.from('\r\n')]);
  if ('simple' in model) return Buffer.from(`+${model.simple}\r\n`);
  if ('int' in model) return Buffer.from(`:${model.int}\r\n`);
  if ('error' in model) return Buffer.from(`-${model.error}\r\n`);
  if ('nil' in model) return Buffer.from('$-1\r\n');
  return Buffer.concat([Buffer.from(`*${model.array.length}\r\n`), ...model.array.map(encode)]);
}

/** What the reader should answer for `model`, in a form `toEqual` compares byte for byte. */
function expected(model: Model): unknown {
  if ('bulk' in model) return model.bulk.toString('hex');
  if ('simple' in model) return model.simple;
  if ('int' in model) return String(model.int);
  if ('error' in model) return { error: model.error };
  if ('nil' in model) return null;
  return model.array.map(expected);
}

function comparable(value: RespValue): unknown {
  if (value instanceof RespError) return { error: value.message };
  if (Buffer.isBuffer(value)) return value.toString('hex');
  if (Array.isArray(value)) return value.map(comparable);
  return value;
}

describe('RespReader', () => {
  it('reads generated replies cut at random places into the same values (300 seeds)', () => {
    for (let seed = 1; seed <= 300; seed++) {
      const random = seeded(seed);
      const models = Array.from({ length: 1 + Math.floor(random() * 5) }, () => generate(random));
      const bytes = Buffer.concat(models.map(encode));
      const replies: unknown[] = [];
      const reader = new RespReader((reply) => replies.push(comparable(reply)));
      // Cuts anywhere, single bytes included: inside lengths, between CR and LF, inside strings.
      for (let at = 0; at < bytes.length;) {
        const size = random() < 0.3 ? 1 : 1 + Math.floor(random() * 3000);
        // A copy, so that a view the reader kept of an earlier chunk would show up as wrong bytes if reused.
        reader.write(Buffer.from(bytes.subarray(at, at + size)));
        at += size;
      }
      expect({ seed, replies }).toEqual({ seed, replies: models.map(expected) });
    }
  });

  it('reads RESP3 types as ioredis legacy mapping does: maps and sets as arrays, booleans as 1 and 0, verbatim strings without their format', () => {
    const replies: unknown[] = [];
    const reader = new RespReader((reply) => replies.push(comparable(reply)));
    reader.write(
      Buffer.from('%2\r\n+a\r\n:1\r\n+b\r\n#t\r\n~2\r\n_\r\n,1.5\r\n=8\r\ntxt:abcd\r\n|1\r\n+ttl\r\n:3\r\n+after-attribute\r\n'),
    );
    expect(replies).toEqual([['a', '1', 'b', '1'], [null, '1.5'], Buffer.from('abcd').toString('hex'), 'after-attribute']);
  });

  it('refuses bytes that are not RESP, naming them', () => {
    const reader = new RespReader(() => undefined);
    expect(() => reader.write(Buffer.from('hello\r\n'))).toThrow(/unknown type byte 104 \(h\)/);
    const other = new RespReader(() => undefined);
    expect(() => other.write(Buffer.from('$x1\r\n'))).toThrow(/not a number \(x1\)/);
  });
});
