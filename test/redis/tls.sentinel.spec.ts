import { Injectable, INestApplicationContext } from '@nestjs/common';
import { EventrailAdmin, EventrailMessage, EventrailPublisher, OnEvent, RedisTlsError } from '../../lib';
import { createApp } from '../support/app';
import { uniquePrefix, waitFor } from '../support/helpers';
import { SentinelSetup, startSentinelSetup } from '../support/sentinel';
import { makeTlsFiles, TlsFiles } from '../support/tls-certs';

const handled: number[] = [];

@Injectable()
class Worker {
  @OnEvent('tls.tick', 'tls-workers')
  handle(message: EventrailMessage<{ n: number }>): void {
    handled.push(message.data.n);
  }
}

/**
 * Sentinel with TLS data nodes: the primary and its replica serve, replicate
 * and are monitored over TLS ports; the sentinels answer on plain ports. A
 * `tls` option in `redis.sentinel` reaches the primary over TLS.
 */
describe('Sentinel with TLS', () => {
  let files: TlsFiles;
  let setup: SentinelSetup;
  const apps: INestApplicationContext[] = [];

  beforeAll(async () => {
    files = await makeTlsFiles();
    setup = await startSentinelSetup(1, 3_000, files);
  });
  afterAll(async () => {
    await Promise.all(apps.map((app) => app.close()));
    await setup?.stop();
    files?.remove();
  });

  it('publishes and consumes through the primary the sentinels name, over TLS', async () => {
    const app = await createApp(
      {
        redis: { sentinel: { sentinels: setup.sentinels, name: setup.name, tls: { ca: files.read(files.caCert) } } },
        prefix: uniquePrefix('stls'),
      },
      [Worker],
    );
    apps.push(app);
    for (let n = 1; n <= 3; n++) await app.get(EventrailPublisher).publish('tls.tick', { n });
    await waitFor(
      () => handled.length === 3,
      () => `3 handled, got ${handled.join(',')}`,
    );
    const [node] = await app.get(EventrailAdmin).nodes();
    expect(node.node).toBe(setup.addressOf(setup.nodes[0]));
    expect(node.replicas).toEqual([setup.addressOf(setup.nodes[1])]);
  });

  it('fails with RedisTlsError at once when the primary’s certificate is not trusted', async () => {
    const start = createApp({
      redis: { sentinel: { sentinels: setup.sentinels, name: setup.name, tls: { ca: files.read(files.otherCaCert) } } },
      prefix: uniquePrefix('stls'),
      startupTimeoutMs: 50_000,
    });
    const error = (await start.catch((e: unknown) => e)) as RedisTlsError;
    expect(error).toBeInstanceOf(RedisTlsError);
    expect(error.message).toContain(`Sentinel primary "${setup.name}"`);
  });
});
