import { Controller, Injectable, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { EventPattern, Payload } from '@nestjs/microservices';
import Redis from 'ioredis';
import { EventrailMessage, EventrailModule, InvalidHandlerError, OnEvent } from '../../lib';
import { EventrailServer } from '../../lib/microservices';
import { deletePrefix, testRedisUrl, uniquePrefix } from '../support/helpers';

@Injectable()
class Orders {
  @OnEvent('order.placed', 'billing')
  handle(_m: EventrailMessage): void {}
}

@Controller()
class Refunds {
  @EventPattern('refund.issued')
  handle(@Payload() _data: unknown): void {}
}

@Controller()
class Voids {
  @EventPattern('refund.voided')
  handle(@Payload() _data: unknown): void {}
}

const options = (prefix: string) => ({ redis: testRedisUrl(), prefix, partitions: 2, lockTtlMs: 2000, heartbeatTtlMs: 2000 });

describe('one consumer per group and log in a process', () => {
  let redis: Redis;
  beforeAll(() => (redis = new Redis(testRedisUrl())));
  afterAll(() => redis.quit());

  it('refuses an EventrailServer({ group }) next to an @OnEvent group of the same name and prefix, naming both', async () => {
    const prefix = uniquePrefix('claim');
    @Module({
      imports: [EventrailModule.forRoot({ redis: testRedisUrl(), prefix, partitions: 2 })],
      providers: [Orders],
      controllers: [Refunds],
    })
    class AppModule {}
    const app = await NestFactory.createMicroservice(AppModule, {
      strategy: new EventrailServer({ ...options(prefix), group: 'billing' }),
      logger: false,
    });
    try {
      await app.init();
      const error = await app.listen().then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(error).toBeInstanceOf(InvalidHandlerError);
      const message = (error as Error).message;
      expect(message).toContain('"billing"');
      expect(message).toContain('Orders.handle');
      expect(message).toContain("@EventPattern('refund.issued')");
      expect(message).toContain(prefix);
    } finally {
      await app.close();
      await deletePrefix(redis, prefix);
    }
  });

  it('refuses a second EventrailServer of one group and prefix with other patterns; the same patterns, another prefix, or the group after the first closed, start', async () => {
    const prefix = uniquePrefix('claim');
    @Module({ controllers: [Refunds] })
    class ServerModule {}
    @Module({ controllers: [Voids] })
    class VoidsModule {}
    const serve = (module: object, at: string) =>
      NestFactory.createMicroservice(module as never, {
        strategy: new EventrailServer({ ...options(at), group: 'refunds' }),
        logger: false,
      });
    const first = await serve(ServerModule, prefix);
    const second = await serve(VoidsModule, prefix);
    const same = await serve(ServerModule, prefix);
    const other = await serve(VoidsModule, `${prefix}-other`);
    const third = await serve(VoidsModule, prefix);
    try {
      await first.listen();
      const error = await second.listen().then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(error).toBeInstanceOf(InvalidHandlerError);
      expect((error as Error).message).toMatch(
        /group "refunds" on the log ".*" is already consumed in this process by @EventPattern\('refund.issued'\); @EventPattern\('refund.voided'\) would run/,
      );
      await same.listen();
      await other.listen();
      await Promise.all([first.close(), same.close()]);
      await third.listen();
    } finally {
      await Promise.all([first, second, same, other, third].map((a) => a.close()));
      await deletePrefix(redis, prefix);
      await deletePrefix(redis, `${prefix}-other`);
    }
  });
});
