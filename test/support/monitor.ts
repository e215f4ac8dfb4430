import { EventEmitter } from 'node:events';
import { connect } from 'node:net';
import type Redis from 'ioredis';

/**
 * A MONITOR connection that is watching before it resolves. ioredis' own `monitor()` marks its client as
 * monitoring a microtask after MONITOR's `+OK`; a monitor line that arrives in the same socket read is
 * taken for the reply of a command nobody sent and fails with "Command queue state error" (seen on a
 * loaded CI host). This reads the RESP lines itself and emits `monitor` with ioredis' arguments:
 * `(time, args, source, db)`, `source` being `lua` for a script's own commands or the caller's address.
 */
export interface CommandMonitor extends EventEmitter {
  on(event: 'monitor', listener: (time: string, args: string[], source: string, db: string) => void): this;
  disconnect(): void;
}

export async function monitorOf(redis: Redis): Promise<CommandMonitor> {
  const { host = '127.0.0.1', port = 6379, username, password } = redis.options;
  const socket = connect({ host, port });
  const emitter = new EventEmitter() as CommandMonitor;
  emitter.disconnect = () => socket.destroy();
  let buffer = '';
  let replies = 0;
  const expected = password ? 2 : 1;
  await new Promise<void>((resolve, reject) => {
    socket.once('error', reject);
    socket.on('connect', () => {
      if (password) socket.write(encode(username ? ['AUTH', username, password] : ['AUTH', password]));
      socket.write(encode(['MONITOR']));
    });
    socket.setEncoding('utf8');
    socket.on('data', (chunk: string) => {
      buffer += chunk;
      let end: number;
      while ((end = buffer.indexOf('\r\n')) >= 0) {
        const line = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        if (line.startsWith('-')) {
          reject(new Error(`MONITOR refused: ${line.slice(1)}`));
          return;
        }
        if (replies < expected) {
          replies += 1;
          if (replies === expected) resolve();
          continue;
        }
        const parsed = parseMonitorLine(line.slice(1));
        if (parsed) emitter.emit('monitor', parsed.time, parsed.args, parsed.source, parsed.db);
      }
    });
  });
  socket.on('error', () => undefined); // destroyed on disconnect; a late reset is not the test's concern
  return emitter;
}

function encode(args: string[]): string {
  return `*${args.length}\r\n${args.map((a) => `$${Buffer.byteLength(a)}\r\n${a}\r\n`).join('')}`;
}

/** `1796264544.863444 [0 127.0.0.1:49762] "evalsha" "551a..." "5"`, arguments escaped as Redis' sdscatrepr does. */
export function parseMonitorLine(line: string): { time: string; db: string; source: string; args: string[] } | undefined {
  const header = /^(\S+) \[(\S+) ([^\]]+)\] /.exec(line);
  if (!header) return undefined;
  const args: string[] = [];
  let i = header[0].length;
  while (i < line.length) {
    if (line[i] === ' ') {
      i += 1;
      continue;
    }
    if (line[i] !== '"') return undefined;
    i += 1;
    let arg = '';
    while (i < line.length && line[i] !== '"') {
      if (line[i] !== '\\') {
        arg += line[i++];
        continue;
      }
      const next = line[i + 1];
      const escapes: Record<string, string> = { n: '\n', r: '\r', t: '\t', a: '\x07', b: '\b', '\\': '\\', '"': '"' };
      if (next === 'x') {
        arg += String.fromCharCode(parseInt(line.slice(i + 2, i + 4), 16));
        i += 4;
      } else {
        arg += escapes[next] ?? next;
        i += 2;
      }
    }
    i += 1; // the closing quote
    args.push(arg);
  }
  return { time: header[1], db: header[2], source: header[3], args };
}
