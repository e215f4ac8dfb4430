import { DynamicModule, Inject, INestApplicationContext, Injectable, Module, Provider } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import {
  ConsumerOptions,
  EventrailConsumers,
  EventrailMessage,
  EventrailModule,
  EventrailModuleOptions,
  EventrailPublisher,
  OnEvent,
  PublishInput,
} from '../../lib';
import { BENCH_EVENT, BenchPayload, keyOf, PAYLOAD } from './payload';

/** The consumer group of every single-group scenario. */
export const BENCH_GROUP = 'bench';

export type BenchHandler = (message: EventrailMessage<BenchPayload>) => void | Promise<void>;

const HANDLER = Symbol('BenchHandler');

/** A user's handler class; what it does is injected per run. */
@Injectable()
class BenchConsumer {
  constructor(@Inject(HANDLER) private readonly handler: BenchHandler) {}

  @OnEvent(BENCH_EVENT, BENCH_GROUP)
  handle(message: EventrailMessage<BenchPayload>): void | Promise<void> {
    return this.handler(message);
  }
}

@Module({})
class BenchAppModule {}

export interface BenchAppOptions {
  url: string;
  prefix: string;
  partitions?: number;
  consumer?: ConsumerOptions;
  /** Handles group "bench"; without it the app only publishes. */
  handler?: BenchHandler;
  /** More providers: handler classes of other groups and what they inject (the idle scenario's three groups). */
  providers?: Provider[];
  redis?: EventrailModuleOptions['redis'];
}

/**
 * A Nest application context with eventrail, as a user app would have it.
 * Consumers do not start on their own (`autoStart: false`): the scenario
 * starts them with `EventrailConsumers.start()` when its clock starts.
 */
export function createEventrailApp(options: BenchAppOptions): Promise<INestApplicationContext> {
  const providers: Provider[] = [...(options.providers ?? [])];
  if (options.handler) providers.push({ provide: HANDLER, useValue: options.handler }, BenchConsumer);
  const root: DynamicModule = {
    module: BenchAppModule,
    imports: [
      EventrailModule.forRoot({
        redis: options.redis ?? options.url,
        prefix: options.prefix,
        partitions: options.partitions ?? 1,
        consumer: options.consumer,
        autoStart: false,
      }),
    ],
    providers,
  };
  return NestFactory.createApplicationContext(root, { logger: ['error'], abortOnError: false });
}

export function startConsumers(app: INestApplicationContext): Promise<void> {
  return app.get(EventrailConsumers).start();
}

/** Appends `count` events with `publishMany`, 1000 a call; keyed over `keys` keys when given. */
export async function fillLog(app: INestApplicationContext, count: number, keys?: number): Promise<void> {
  const publisher = app.get(EventrailPublisher);
  for (let from = 0; from < count; from += 1000) {
    const batch: PublishInput[] = [];
    for (let i = from; i < Math.min(count, from + 1000); i++) {
      batch.push({ event: BENCH_EVENT, data: PAYLOAD, key: keys === undefined ? undefined : keyOf(i, keys) });
    }
    await publisher.publishMany(batch);
  }
}
