import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);

/** PEM files of a throwaway PKI, as paths (for redis-server and the CLI) and contents (for ioredis `tls`). */
export interface TlsFiles {
  dir: string;
  caCert: string;
  serverCert: string;
  serverKey: string;
  clientCert: string;
  clientKey: string;
  /** A CA that signed nothing here: trusting it alone must fail verification. */
  otherCaCert: string;
  read(path: string): string;
  /** Deletes the directory. */
  remove(): void;
}

/**
 * A certificate authority made with `openssl` for one test file: a server
 * certificate for 127.0.0.1 and localhost (also good as a client certificate:
 * cluster-bus peers always present theirs), a client certificate, both signed
 * by it, and an unrelated second CA. Keys are EC P-256 (fast to make).
 */
export async function makeTlsFiles(): Promise<TlsFiles> {
  const dir = mkdtempSync(join(tmpdir(), 'eventrail-tls-'));
  const path = (name: string): string => join(dir, name);
  const openssl = (...args: string[]): Promise<unknown> => run('openssl', args, { cwd: dir });
  const newKey = (name: string): Promise<unknown> => openssl('ecparam', '-name', 'prime256v1', '-genkey', '-noout', '-out', path(name));
  const selfSigned = async (name: string, subject: string): Promise<void> => {
    await newKey(`${name}.key`);
    await openssl(
      'req',
      '-x509',
      '-new',
      '-key',
      path(`${name}.key`),
      '-sha256',
      '-days',
      '2',
      '-subj',
      subject,
      '-out',
      path(`${name}.crt`),
    );
  };
  const signed = async (name: string, subject: string, extensions: string): Promise<void> => {
    await newKey(`${name}.key`);
    await openssl('req', '-new', '-key', path(`${name}.key`), '-subj', subject, '-out', path(`${name}.csr`));
    writeFileSync(path(`${name}.ext`), extensions);
    await openssl(
      ...['x509', '-req', '-in', path(`${name}.csr`), '-CA', path('ca.crt'), '-CAkey', path('ca.key'), '-CAcreateserial'],
      ...['-days', '2', '-sha256', '-extfile', path(`${name}.ext`), '-out', path(`${name}.crt`)],
    );
  };
  try {
    await selfSigned('ca', '/CN=eventrail test CA');
    await selfSigned('other-ca', '/CN=eventrail unrelated CA');
    await signed('server', '/CN=localhost', 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n');
    await signed('client', '/CN=eventrail-client', 'extendedKeyUsage=clientAuth\n');
  } catch (error) {
    rmSync(dir, { recursive: true, force: true });
    throw error;
  }
  return {
    dir,
    caCert: path('ca.crt'),
    serverCert: path('server.crt'),
    serverKey: path('server.key'),
    clientCert: path('client.crt'),
    clientKey: path('client.key'),
    otherCaCert: path('other-ca.crt'),
    read: (file) => readFileSync(file, 'utf8'),
    remove: () => rmSync(dir, { recursive: true, force: true }),
  };
}

/** redis-server arguments for a TLS port beside the plain one (the tests' own setup and checks use the plain one). */
export function tlsServerArgs(files: TlsFiles, tlsPort: number, authClients: boolean): string[] {
  return [
    ...['--tls-port', String(tlsPort), '--tls-cert-file', files.serverCert, '--tls-key-file', files.serverKey],
    ...['--tls-ca-cert-file', files.caCert, '--tls-auth-clients', authClients ? 'yes' : 'no'],
  ];
}
