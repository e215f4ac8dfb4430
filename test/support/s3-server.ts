import { mkdtemp, rm } from 'node:fs/promises';
import { createServer, IncomingMessage, request, Server, ServerResponse } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { S3Client } from '@aws-sdk/client-s3';
import S3rver from 's3rver';
import { freePort } from './redis-server';

export const S3_CREDENTIALS = { accessKeyId: 'S3RVER', secretAccessKey: 'S3RVER' };

export interface S3TestServer {
  endpoint: string;
  bucket: string;
  /** A client for the tests' own checks, configured as eventrail configures its own. */
  client: S3Client;
  stop(): Promise<void>;
}

/** Starts a real S3-compatible server (s3rver) on a free loopback port, storing in a temp dir it removes on stop. */
export async function startS3Server(bucket = 'eventrail-archive'): Promise<S3TestServer> {
  const directory = await mkdtemp(join(tmpdir(), 'eventrail-s3-'));
  const port = await freePort();
  const server = new S3rver({ address: '127.0.0.1', port, directory, silent: true, configureBuckets: [{ name: bucket }] });
  await server.run();
  const endpoint = `http://127.0.0.1:${port}`;
  const client = new S3Client({
    region: 'us-east-1',
    endpoint,
    forcePathStyle: true,
    credentials: S3_CREDENTIALS,
    requestChecksumCalculation: 'WHEN_REQUIRED',
    responseChecksumValidation: 'WHEN_REQUIRED',
  });
  return {
    endpoint,
    bucket,
    client,
    async stop() {
      client.destroy();
      await server.close();
      await rm(directory, { recursive: true, force: true });
    },
  };
}

export interface GatedProxy {
  endpoint: string;
  /** PUT requests received (held or forwarded). */
  puts(): number;
  /** PUT requests waiting for `open()`. */
  held(): number;
  /** Forwards the held PUTs and every later one. */
  open(): void;
  close(): Promise<void>;
}

/** An HTTP proxy in front of `target` that holds every PUT until `open()`: a cycle uploading through it waits there. */
export async function startGatedProxy(target: string): Promise<GatedProxy> {
  const upstream = new URL(target);
  let isOpen = false;
  let puts = 0;
  const waiting: Array<() => void> = [];
  const forward = (req: IncomingMessage, res: ServerResponse): void => {
    const out = request(
      { host: upstream.hostname, port: upstream.port, method: req.method, path: req.url, headers: req.headers },
      (answer) => {
        res.writeHead(answer.statusCode ?? 502, answer.headers);
        answer.pipe(res);
      },
    );
    out.on('error', () => res.destroy());
    req.pipe(out);
  };
  const server: Server = createServer((req, res) => {
    if (req.method !== 'PUT') return forward(req, res);
    puts++;
    if (isOpen) return forward(req, res);
    waiting.push(() => forward(req, res));
  });
  const port = await freePort();
  await new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve));
  return {
    endpoint: `http://127.0.0.1:${port}`,
    puts: () => puts,
    held: () => waiting.length,
    open() {
      isOpen = true;
      for (const release of waiting.splice(0)) release();
    },
    async close() {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
