import { Injectable, INestApplicationContext } from '@nestjs/common';
import type { RedisOptions } from 'ioredis';
import { EventrailMessage, EventrailPublisher, OnEvent, RedisTlsError, RedisUnavailableError } from '../../lib';

import { createApp } from '../support/app';
import { uniquePrefix, waitFor } from '../support/helpers';
import { freePort, RedisServer, startRedisServer } from '../support/redis-server';
import { makeTlsFiles, TlsFiles, tlsServerArgs } from '../support/tls-certs';
import { assertBuilt, cliEnv, outcome, parseJson, runCli } from '../cli/cli.harness';

const handled: string[] = [];

@Injectable()
class Recorder {
  @OnEvent('tls.ping', 'tls-readers')
  handle(message: EventrailMessage<{ n: number }>): void {
    handled.push(`${message.data.n}`);
  }
}

/**
 * TLS against a real redis-server with `--tls-port`: a throwaway CA signs the
 * server's certificate and a client certificate; a second CA signs nothing.
 * One server checks client certificates (`--tls-auth-clients yes`), one does
 * not. Both keep a plain port for the tests' own setup.
 */
describe('TLS', () => {
  let files: TlsFiles;
  let serverOnly: RedisServer;
  let serverOnlyPort: number;
  let mutual: RedisServer;
  let mutualPort: number;
  const apps: INestApplicationContext[] = [];

  beforeAll(async () => {
    files = await makeTlsFiles();
    serverOnlyPort = await freePort();
    serverOnly = await startRedisServer(undefined, tlsServerArgs(files, serverOnlyPort, false));
    mutualPort = await freePort();
    mutual = await startRedisServer(undefined, tlsServerArgs(files, mutualPort, true));
  });

  afterEach(async () => {
    await Promise.all(apps.splice(0).map((app) => app.close()));
    handled.length = 0;
  });

  afterAll(async () => {
    await Promise.all([serverOnly?.stop(), mutual?.stop()]);
    files?.remove();
  });

  const tlsTo = (port: number, tls: RedisOptions['tls']): RedisOptions => ({ host: '127.0.0.1', port, tls });

  const publishAndConsume = async (redis: RedisOptions): Promise<void> => {
    const app = await createApp({ redis, prefix: uniquePrefix('tls') }, [Recorder]);
    apps.push(app);
    const publisher = app.get(EventrailPublisher);
    for (let n = 1; n <= 5; n++) await publisher.publish('tls.ping', { n });
    await waitFor(
      () => handled.length === 5,
      () => `5 handled over TLS, got ${handled.join(',')}`,
    );
    expect(handled).toEqual(['1', '2', '3', '4', '5']);
  };

  it('publishes and consumes over TLS, trusting the CA given as tls.ca', async () => {
    await publishAndConsume(tlsTo(serverOnlyPort, { ca: files.read(files.caCert) }));
  });

  it('presents a client certificate where the server requires one', async () => {
    await publishAndConsume(
      tlsTo(mutualPort, { ca: files.read(files.caCert), cert: files.read(files.clientCert), key: files.read(files.clientKey) }),
    );
  });

  it('without the client certificate startup fails naming the refusal', async () => {
    const start = createApp({
      redis: tlsTo(mutualPort, { ca: files.read(files.caCert) }),
      prefix: uniquePrefix('tls'),
      startupTimeoutMs: 1_500,
    });
    await expect(start).rejects.toThrow(RedisUnavailableError);
    await expect(start).rejects.toThrow(/CERTIFICATE_REQUIRED.*tls\.cert|ECONNRESET/);
  });

  it.each([false, true])(
    'a server certificate from an unknown CA fails startup with RedisTlsError at the first attempt (allowDegradedStart %s)',
    async (allowDegradedStart) => {
      // A long startupTimeoutMs: waiting it out would end in a plain RedisUnavailableError, not RedisTlsError.
      const start = createApp({
        redis: tlsTo(serverOnlyPort, { ca: files.read(files.otherCaCert) }),
        prefix: uniquePrefix('tls'),
        startupTimeoutMs: 50_000,
        allowDegradedStart,
      });
      const error = (await start.catch((e: unknown) => e)) as RedisTlsError;
      expect(error).toBeInstanceOf(RedisTlsError);
      expect(error.code).toBe('SELF_SIGNED_CERT_IN_CHAIN');
      expect(error.message).toContain(`TLS handshake with 127.0.0.1:${serverOnlyPort} failed (SELF_SIGNED_CERT_IN_CHAIN)`);
      expect(error.message).toContain('tls.ca');
    },
  );

  it('a plain client on the TLS port is not mistaken for a TLS failure, and still fails within startupTimeoutMs', async () => {
    const start = createApp({ redis: `redis://127.0.0.1:${serverOnlyPort}`, prefix: uniquePrefix('tls'), startupTimeoutMs: 1_000 });
    await expect(start).rejects.toThrow(RedisUnavailableError);
  });

  describe('CLI', () => {
    beforeAll(() => assertBuilt());

    it('connects to rediss:// with --tls-ca, and with a client certificate from EVENTRAIL_REDIS_TLS_*', async () => {
      const prefix = uniquePrefix('tls-cli');
      const published = await runCli(
        ['--redis-url', `rediss://127.0.0.1:${serverOnlyPort}`, '--tls-ca', files.caCert, '--json', 'publish', 'tls.ping', '{"n":1}'],
        cliEnv(prefix),
      );
      expect(outcome(published)).toEqual({ code: 0, stderr: '' });
      const status = await runCli(
        ['--json', 'status'],
        cliEnv(prefix, {
          EVENTRAIL_REDIS_URL: `valkeys://127.0.0.1:${mutualPort}`,
          EVENTRAIL_REDIS_TLS_CA: files.caCert,
          EVENTRAIL_REDIS_TLS_CERT: files.clientCert,
          EVENTRAIL_REDIS_TLS_KEY: files.clientKey,
        }),
      );
      // The mutual server is another Redis: no log there, which the CLI says only after connecting.
      expect(status.code).toBe(1);
      expect(status.stderr).toContain(`No eventrail log with prefix "${prefix}" at rediss://127.0.0.1:${mutualPort}`);
      const onServerOnly = await runCli(
        ['--tls-ca', files.caCert, '--json', 'status'],
        cliEnv(prefix, { EVENTRAIL_REDIS_URL: `rediss://127.0.0.1:${serverOnlyPort}` }),
      );
      expect(outcome(onServerOnly)).toEqual({ code: 0, stderr: '' });
      expect(parseJson<{ partitions: Array<{ length: number }> }>(onServerOnly).partitions[0].length).toBe(1);
    });

    it('names the TLS failure with a wrong CA, and refuses TLS files on a plain URL', async () => {
      const prefix = uniquePrefix('tls-cli');
      const wrongCa = await runCli(
        ['--tls-ca', files.otherCaCert, 'status'],
        cliEnv(prefix, { EVENTRAIL_REDIS_URL: `rediss://127.0.0.1:${serverOnlyPort}` }),
      );
      expect(wrongCa.code).toBe(1);
      expect(wrongCa.stderr).toContain('SELF_SIGNED_CERT_IN_CHAIN');
      const plain = await runCli(
        ['--tls-ca', files.caCert, 'status'],
        cliEnv(prefix, { EVENTRAIL_REDIS_URL: `redis://127.0.0.1:${serverOnlyPort}` }),
      );
      expect(plain.code).toBe(2);
      expect(plain.stderr).toContain('--tls-ca needs a TLS URL');
    });
  });
});
