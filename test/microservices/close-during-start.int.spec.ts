import { Controller, INestMicroservice, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { EventPattern, Payload } from '@nestjs/microservices';
import Redis from 'ioredis';
import { lastValueFrom } from 'rxjs';
import { setTimeout as delay } from 'node:timers/promises';
import { EventrailKeys } from '../../lib/redis/keys';
import { ClientClosedError, EventrailClient, EventrailServer } from '../../lib/microservices';
import { uniquePrefix, waitFor } from '../support/helpers';
import { freePort, startRedisServer, type RedisServer } from '../support/redis-server';

const handled: unknown[] = [];

@Controller()
class Handlers {
  @EventPattern<string>('payment.completed')
  completed(@Payload() data: unknown): void {
    handled.push(data);
  }
}

@Module({ controllers: [Handlers] })
class AppModule {}

/** Connections to `inspect`'s server other than its own. */
async function otherConnections(inspect: Redis): Promise<string[]> {
  const own = await inspect.client('ID');
  const list = (await inspect.client('LIST')) as string;
  return list
    .split('\n')
    .filter((line) => line.startsWith('id=') && !line.startsWith(`id=${own} `))
    .map((line) => line.replace(/ .*?(addr=\S+).*?(cmd=\S+).*/, ' $1 $2'));
}

/**
 * Redis does not answer at start (nothing listens on the port); the close comes
 * `closeAfterMs` into the start, and Redis starts only after it. Whatever the
 * close interrupted must stay stopped once Redis answers.
 */
describe('closing while the start waits for Redis', () => {
  let server: RedisServer | undefined;
  let inspect: Redis | undefined;

  afterEach(async () => {
    inspect?.disconnect();
    inspect = undefined;
    await server?.stop();
    server = undefined;
  });

  it.each([0, 20, 150, 600])(
    'EventrailServer closed %i ms into listen() never joins, handles or commits, and leaves no connection',
    async (closeAfterMs) => {
      handled.length = 0;
      const port = await freePort();
      const prefix = uniquePrefix('ms-close-start');
      const transport = new EventrailServer({ redis: `redis://127.0.0.1:${port}`, prefix, group: 'billing', startupTimeoutMs: 8_000 });
      const app: INestMicroservice = await NestFactory.createMicroservice(AppModule, { strategy: transport, logger: false });
      const listening = app.listen().then(
        () => 'listened',
        (error: unknown) => error,
      );
      await delay(closeAfterMs);
      await app.close();

      server = await startRedisServer(port);
      inspect = new Redis(server.url);
      const client = new EventrailClient({ redis: server.url, prefix });
      await lastValueFrom(client.emit('payment.completed', { n: 1 }));
      await client.close();
      // The interrupted listen() settles (it does not wait out startupTimeoutMs) and started nothing.
      expect(await listening).toBe('listened');
      const keys = new EventrailKeys(prefix, 1);
      expect(await inspect.exists(keys.members('billing'), keys.lease('billing', 0), keys.offset('billing', 0))).toBe(0);
      let last: string[] = [];
      await waitFor(
        async () => (last = await otherConnections(inspect!)).length === 0,
        () => `no connection left but the inspector's, still: ${last.join('; ')}`,
        3_000,
      );
      expect(handled).toEqual([]);
      // A late start would have joined by now; it must not.
      expect(await inspect.exists(keys.members('billing'))).toBe(0);
      await transport.close();
    },
  );

  it.each([0, 20, 150, 600])(
    'EventrailClient closed %i ms into connect() fails that connect with ClientClosedError and leaves no connection',
    async (closeAfterMs) => {
      const port = await freePort();
      const client = new EventrailClient({
        redis: `redis://127.0.0.1:${port}`,
        prefix: uniquePrefix('ms-close-connect'),
        startupTimeoutMs: 8_000,
      });
      const connecting = client.connect().then(
        () => 'connected',
        (error: unknown) => error,
      );
      await delay(closeAfterMs);
      await client.close();
      server = await startRedisServer(port);
      inspect = new Redis(server.url);
      expect(await connecting).toBeInstanceOf(ClientClosedError);
      let last: string[] = [];
      await waitFor(
        async () => (last = await otherConnections(inspect!)).length === 0,
        () => `no connection left but the inspector's, still: ${last.join('; ')}`,
        3_000,
      );
      // Emitting after close connects anew, as an emit before the first connect does.
      await client.close();
    },
  );
});
