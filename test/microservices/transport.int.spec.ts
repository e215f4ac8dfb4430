import {
  ArgumentMetadata,
  CallHandler,
  Catch,
  CanActivate,
  Controller,
  ExecutionContext,
  Inject,
  Injectable,
  INestMicroservice,
  Module,
  NestInterceptor,
  PipeTransform,
  RpcExceptionFilter,
  UseFilters,
  UseGuards,
  UseInterceptors,
} from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { ClientProxy, ClientsModule, Ctx, EventPattern, MessagePattern, Payload } from '@nestjs/microservices';
import Redis from 'ioredis';
import { EMPTY, lastValueFrom, Observable, tap } from 'rxjs';
import { EventrailConsumers, InvalidEventNameError, NonRetryableError, PublishResult, RedisUnavailableError } from '../../lib';
import { EventrailKeys } from '../../lib/redis/keys';
import { decodeDeadLetter, DeadLetter } from '../../lib/wire/dead-letter.codec';
import {
  EventrailClient,
  EventrailContext,
  EventrailExceptionFilter,
  EventrailRecord,
  EventrailServer,
  EventrailServerOptions,
  HandlerReplyError,
  RequestResponseNotSupportedError,
} from '../../lib/microservices';
import { deletePrefix, testRedisUrl, uniquePrefix, waitFor } from '../support/helpers';
import { freePort, startRedisServer } from '../support/redis-server';

interface Seen {
  data: unknown;
  id: string;
  key: string | null;
  partition: number;
  offset: string;
  attempt: number;
  headers: Record<string, string>;
  group: string;
}

class PaymentDeclinedError extends Error {}

/** Records what reached the handlers, per test. */
@Injectable()
class Journal {
  readonly seen = new Map<string, Seen[]>();
  readonly log: string[] = [];
  readonly filtered: string[] = [];
  /** `flaky` fails until this attempt. */
  succeedOnAttempt = 3;

  record(pattern: string, data: unknown, ctx: EventrailContext): void {
    const list = this.seen.get(pattern) ?? [];
    list.push({
      data,
      id: ctx.getId(),
      key: ctx.getKey(),
      partition: ctx.getPartition(),
      offset: ctx.getOffset(),
      attempt: ctx.getAttempt(),
      headers: ctx.getHeaders(),
      group: ctx.getGroup(),
    });
    this.seen.set(pattern, list);
  }

  of(pattern: string): Seen[] {
    return this.seen.get(pattern) ?? [];
  }
}

/** Turns `{ cents: "1250" }` into `{ cents: 1250 }`; a Nest pipe on `@Payload()`. */
@Injectable()
class CentsPipe implements PipeTransform<{ cents: string }, { cents: number }> {
  transform(value: { cents: string }, _metadata: ArgumentMetadata): { cents: number } {
    return { ...value, cents: Number(value.cents) };
  }
}

/** Lets only tenant "acme" through, from the event's headers. */
@Injectable()
class TenantGuard implements CanActivate {
  canActivate(context: ExecutionContext): boolean {
    return context.switchToRpc().getContext<EventrailContext>().getHeaders().tenant === 'acme';
  }
}

@Injectable()
class AroundInterceptor implements NestInterceptor {
  constructor(@Inject(Journal) private readonly journal: Journal) {}
  intercept(context: ExecutionContext, next: CallHandler): Observable<unknown> {
    const id = context.switchToRpc().getContext<EventrailContext>().getId();
    this.journal.log.push(`before ${id}`);
    return next.handle().pipe(tap(() => this.journal.log.push(`after ${id}`)));
  }
}

/** Declined payments are handled by the filter: swallowed, so the attempt succeeds. */
@Catch(PaymentDeclinedError)
class DeclinedFilter implements RpcExceptionFilter<PaymentDeclinedError> {
  constructor(private readonly journal: Journal) {}
  catch(error: PaymentDeclinedError): Observable<never> {
    this.journal.filtered.push(error.message);
    return EMPTY;
  }
}

@Controller()
class BillingController {
  constructor(@Inject(Journal) private readonly journal: Journal) {}

  @EventPattern<string>('payment.completed')
  completed(@Payload() data: unknown, @Ctx() ctx: EventrailContext): void {
    this.journal.record('payment.completed', data, ctx);
  }

  @EventPattern<string>('flaky')
  flaky(@Payload() data: unknown, @Ctx() ctx: EventrailContext): Promise<void> {
    this.journal.record('flaky', data, ctx);
    if (ctx.getAttempt() < this.journal.succeedOnAttempt) return Promise.reject(new Error(`not yet (attempt ${ctx.getAttempt()})`));
    return Promise.resolve();
  }

  @EventPattern<string>('broken')
  broken(@Payload() data: unknown, @Ctx() ctx: EventrailContext): Observable<never> {
    this.journal.record('broken', data, ctx);
    // An errored stream, not a throw.
    return new Observable((subscriber) => subscriber.error(new Error('ledger is read-only')));
  }

  @EventPattern<string>('poison')
  poison(@Payload() data: unknown, @Ctx() ctx: EventrailContext): void {
    this.journal.record('poison', data, ctx);
    throw new NonRetryableError('cannot ever be handled');
  }

  @EventPattern<string>('charge')
  @UseGuards(TenantGuard)
  @UseInterceptors(AroundInterceptor)
  @UseFilters(DeclinedFilter)
  charge(@Payload(CentsPipe) data: { cents: number; declined?: boolean }, @Ctx() ctx: EventrailContext): void {
    this.journal.record('charge', data, ctx);
    if (data.declined) throw new PaymentDeclinedError(`declined ${ctx.getId()}`);
  }
}

@Controller()
class RpcController {
  @MessagePattern('sum')
  sum(data: number[]): number {
    return data.reduce((a, b) => a + b, 0);
  }
}

function clientModule(
  prefix: string,
  partitions: number,
  redis = testRedisUrl(),
  startupTimeoutMs?: number,
): ReturnType<typeof ClientsModule.register> {
  return ClientsModule.register([
    { name: 'EVENTS', customClass: EventrailClient, options: { redis, prefix, partitions, startupTimeoutMs } },
  ]);
}

describe('@nestjs/microservices transport', () => {
  const redis = new Redis(testRedisUrl());
  const apps: INestMicroservice[] = [];
  const prefixes: string[] = [];

  afterEach(async () => {
    await Promise.all(apps.splice(0).map((app) => app.close()));
    await Promise.all(prefixes.splice(0).map((prefix) => deletePrefix(redis, prefix)));
  });
  afterAll(() => redis.quit());

  async function start(
    options: Partial<EventrailServerOptions> = {},
    controllers: Array<new (...args: never[]) => unknown> = [BillingController],
  ): Promise<{ app: INestMicroservice; client: ClientProxy; journal: Journal; prefix: string; server: EventrailServer }> {
    const prefix = options.prefix ?? uniquePrefix('ms');
    prefixes.push(prefix);
    const partitions = options.partitions ?? 1;
    @Module({ imports: [clientModule(prefix, partitions)], controllers, providers: [Journal] })
    class AppModule {}
    const server = new EventrailServer({
      redis: testRedisUrl(),
      prefix,
      group: 'billing',
      retryBackoffMs: 1,
      retryBackoffMaxMs: 5,
      ...options,
    });
    const app = await NestFactory.createMicroservice(AppModule, { strategy: server, logger: false });
    app.useGlobalFilters(new EventrailExceptionFilter());
    apps.push(app);
    await app.listen();
    return { app, client: app.get<ClientProxy>('EVENTS'), journal: app.get(Journal), prefix, server };
  }

  /** The list once it has `count` items (never a fixed sleep). */
  function waitForCount<T>(read: () => T[] | Promise<T[]>, count: number, what: string): Promise<T[]> {
    return waitFor(async () => {
      const list = await read();
      return list.length === count ? list : undefined;
    }, what);
  }

  async function deadLetters(prefix: string, group = 'billing'): Promise<DeadLetter[]> {
    const entries = await redis.xrange(new EventrailKeys(prefix, 1).deadLetters(group), '-', '+');
    return entries.map(([id, fields]) => decodeDeadLetter(id, fields));
  }

  it('handles an emitted event with the message in EventrailContext; emit completes once the entry is in Redis', async () => {
    const { client, journal, prefix } = await start();
    const result = await lastValueFrom(client.emit<PublishResult>('payment.completed', { orderId: 'o-1', cents: 1250 }));
    // Already appended when emit completed.
    const [[offset]] = await redis.xrange(new EventrailKeys(prefix, 1).stream(0), result.offset, result.offset);
    expect(offset).toBe(result.offset);
    const [seen] = await waitForCount(() => journal.of('payment.completed'), 1, 'the handler call');
    expect(seen).toEqual({
      data: { orderId: 'o-1', cents: 1250 },
      id: result.id,
      key: null,
      partition: 0,
      offset: result.offset,
      attempt: 1,
      headers: {},
      group: 'billing',
    });
  });

  it('EventrailRecord sets the key, headers and id; one key is handled in emit order', async () => {
    const { client, journal } = await start({ partitions: 4, concurrency: 4 });
    const record = new EventrailRecord({ n: 0 }, { key: 'order-7', headers: { tenant: 'acme' }, id: 'evt-0' });
    const first = await lastValueFrom(client.emit<PublishResult>('payment.completed', record));
    expect(first.id).toBe('evt-0');
    const emits: Array<Promise<unknown>> = [];
    for (let n = 1; n <= 60; n++) {
      emits.push(lastValueFrom(client.emit('payment.completed', new EventrailRecord({ n }, { key: `order-${n % 3}` }))));
    }
    await Promise.all(emits);
    const seen = await waitForCount(() => journal.of('payment.completed'), 61, '61 handler calls');
    expect(seen.find((s) => s.id === 'evt-0')).toMatchObject({ key: 'order-7', headers: { tenant: 'acme' } });
    for (const key of ['order-0', 'order-1', 'order-2']) {
      const order = seen.filter((s) => s.key === key).map((s) => (s.data as { n: number }).n);
      expect(order).toEqual([...order].sort((a, b) => a - b));
      expect(order).toHaveLength(20);
    }
  });

  it("metadata a dispatch hook puts on the packet travels as headers, under the record's own", async () => {
    const { client, journal } = await start();
    client.setOnDispatchHook((packet) => (packet.metadata = { tenant: 'from-hook', region: 'eu' }));
    await lastValueFrom(client.emit('payment.completed', new EventrailRecord({ n: 1 }, { headers: { tenant: 'acme' } })));
    const [seen] = await waitForCount(() => journal.of('payment.completed'), 1, 'the handler call');
    expect(seen.headers).toEqual({ tenant: 'acme', region: 'eu' });
  });

  it('processes of one group share the partitions and handle each event once; another group gets every event too', async () => {
    const prefix = uniquePrefix('ms');
    const first = await start({ prefix, partitions: 4, lockTtlMs: 2_000, heartbeatTtlMs: 2_000 });
    const second = await start({ prefix, partitions: 4, lockTtlMs: 2_000, heartbeatTtlMs: 2_000 });
    const audit = await start({ prefix, partitions: 4, group: 'audit' });
    const owned = (s: EventrailServer): number[] => s.unwrap<EventrailConsumers>().ownership().billing ?? [];
    // The fair share (2 partitions each) is settled before anything is emitted.
    await waitFor(() => owned(first.server).length === 2 && owned(second.server).length === 2, 'two partitions each');
    const ids = await Promise.all(
      Array.from({ length: 40 }, (_, n) =>
        lastValueFrom(first.client.emit<PublishResult>('payment.completed', new EventrailRecord({ n }, { key: `k-${n}` }))).then(
          (r) => r.id,
        ),
      ),
    );
    const billing = (): Seen[] => [...first.journal.of('payment.completed'), ...second.journal.of('payment.completed')];
    await waitForCount(billing, 40, '40 events handled by the billing group');
    await waitForCount(() => audit.journal.of('payment.completed'), 40, '40 events handled by the audit group');
    expect(
      billing()
        .map((s) => s.id)
        .sort(),
    ).toEqual([...ids].sort());
    expect(first.journal.of('payment.completed').length).toBeGreaterThan(0);
    expect(second.journal.of('payment.completed').length).toBeGreaterThan(0);
    expect(new Set(audit.journal.of('payment.completed').map((s) => s.group))).toEqual(new Set(['audit']));
  });

  it('retries a rejecting handler in place and dead-letters an errored stream after maxRetries, with its error', async () => {
    const { client, journal, prefix } = await start({ ordering: 'partition', maxRetries: 2 });
    await lastValueFrom(client.emit('flaky', { n: 1 }));
    await lastValueFrom(client.emit('broken', { n: 2 }));
    await lastValueFrom(client.emit('payment.completed', { n: 3 }));
    // Order within the partition: the retries of `flaky` and `broken` held the next event back.
    await waitFor(() => journal.of('payment.completed').length === 1, 'the event after the failing ones');
    expect(journal.of('flaky').map((s) => s.attempt)).toEqual([1, 2, 3]);
    expect(journal.of('broken').map((s) => s.attempt)).toEqual([1, 2, 3]);
    const [letter] = await waitForCount(() => deadLetters(prefix), 1, 'one dead letter');
    expect(letter).toMatchObject({ event: 'broken', reason: 'retries-exhausted', attempts: 3, data: { n: 2 } });
    expect(letter.error.message).toBe('ledger is read-only');
  });

  it('dead-letters a NonRetryableError at once when EventrailExceptionFilter passes it through', async () => {
    const { client, journal, prefix } = await start({ maxRetries: 5 });
    await lastValueFrom(client.emit('poison', {}));
    const [letter] = await waitForCount(() => deadLetters(prefix), 1, 'one dead letter');
    expect(letter).toMatchObject({ event: 'poison', reason: 'non-retryable', attempts: 1 });
    expect(letter.error).toMatchObject({ name: 'NonRetryableError', message: 'cannot ever be handled' });
    expect(journal.of('poison')).toHaveLength(1);
  });

  it("applies Nest's pipes, guards, interceptors and exception filters to @EventPattern handlers", async () => {
    const { client, journal, prefix } = await start({ ordering: 'partition', maxRetries: 0 });
    const acme = { headers: { tenant: 'acme' } };
    const ok = await lastValueFrom(client.emit<PublishResult>('charge', new EventrailRecord({ cents: '1250' }, acme)));
    const declined = await lastValueFrom(client.emit<PublishResult>('charge', new EventrailRecord({ cents: '99', declined: true }, acme)));
    const other = await lastValueFrom(
      client.emit<PublishResult>('charge', new EventrailRecord({ cents: '5' }, { headers: { tenant: 'evil' } })),
    );
    await lastValueFrom(client.emit('payment.completed', { n: 'last' }));
    await waitFor(() => journal.of('payment.completed').length === 1, 'the event after the charges');

    // The pipe turned the string into a number; the guard kept tenant "evil" away from the handler.
    expect(journal.of('charge').map((s) => [s.id, s.data])).toEqual([
      [ok.id, { cents: 1250 }],
      [declined.id, { cents: 99, declined: true }],
    ]);
    // The interceptor wrapped the successful call.
    expect(journal.log).toEqual([`before ${ok.id}`, `after ${ok.id}`, `before ${declined.id}`]);
    // The filter handled the declined payment: no retry, no dead letter for it.
    expect(journal.filtered).toEqual([`declined ${declined.id}`]);
    // The guard's refusal is a failed attempt: with maxRetries 0, a dead letter at once.
    const letters = await deadLetters(prefix);
    expect(letters.map((l) => [l.eventId, l.reason, l.error.message])).toEqual([[other.id, 'retries-exhausted', 'Forbidden resource']]);
  });

  it("without EventrailExceptionFilter, Nest's reply still fails the attempt (HandlerReplyError)", async () => {
    const prefix = uniquePrefix('ms');
    prefixes.push(prefix);
    @Module({ imports: [clientModule(prefix, 1)], controllers: [BillingController], providers: [Journal] })
    class PlainModule {}
    const server = new EventrailServer({
      redis: testRedisUrl(),
      prefix,
      group: 'billing',
      ordering: 'partition',
      maxRetries: 1,
      retryBackoffMs: 1,
    });
    const app = await NestFactory.createMicroservice(PlainModule, { strategy: server, logger: false });
    apps.push(app);
    await app.listen();
    await lastValueFrom(app.get<ClientProxy>('EVENTS').emit('poison', {}));
    const [letter] = await waitForCount(() => deadLetters(prefix), 1, 'one dead letter');
    // Nest replaced the NonRetryableError with its generic reply, so it was retried once.
    expect(letter).toMatchObject({ reason: 'retries-exhausted', attempts: 2 });
    expect(letter.error.name).toBe(HandlerReplyError.name);
    expect(letter.error.message).toContain('Internal server error');
  });

  it('refuses send, and a @MessagePattern handler at listen, with RequestResponseNotSupportedError', async () => {
    const { client } = await start();
    await expect(lastValueFrom(client.send('sum', [1, 2]))).rejects.toThrow(RequestResponseNotSupportedError);
    await expect(lastValueFrom(client.send('sum', [1, 2]))).rejects.toThrow(/no one reply to wait for/);
    await expect(start({}, [RpcController])).rejects.toThrow(RequestResponseNotSupportedError);
  });

  it("emit errors with the publisher's typed errors: a bad event name, and Redis not answering", async () => {
    const { client } = await start();
    await expect(lastValueFrom(client.emit('', { n: 1 }))).rejects.toThrow(InvalidEventNameError);
    const port = await freePort();
    const offline = new EventrailClient({ redis: `redis://127.0.0.1:${port}`, prefix: uniquePrefix('ms'), startupTimeoutMs: 300 });
    await expect(lastValueFrom(offline.emit('payment.completed', { n: 1 }))).rejects.toThrow(RedisUnavailableError);
    await offline.close();
  });

  it('emit errors with RedisUnavailableError once a connected Redis goes away', async () => {
    const server = await startRedisServer();
    const client = new EventrailClient({ redis: server.url, prefix: uniquePrefix('ms') });
    try {
      await expect(lastValueFrom(client.emit<PublishResult>('payment.completed', { n: 1 }))).resolves.toMatchObject({ partition: 0 });
      await server.stop();
      await waitFor(() => client.unwrap<Redis>().status !== 'ready', 'the client to notice the outage');
      await expect(lastValueFrom(client.emit('payment.completed', { n: 2 }))).rejects.toThrow(RedisUnavailableError);
    } finally {
      await client.close();
      await server.stop();
    }
  });

  it('validates its options like forRoot, naming the option', () => {
    expect(() => new EventrailServer({ group: 'billing', maxRetrys: 3 } as EventrailServerOptions)).toThrow(
      /maxRetrys.*did you mean maxRetries/,
    );
    expect(() => new EventrailServer({} as EventrailServerOptions)).toThrow(/group/);
    expect(() => new EventrailClient({ prefx: 'x' } as never)).toThrow(/did you mean prefix/);
  });
});
