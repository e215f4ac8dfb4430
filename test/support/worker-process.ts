/**
 * A worker process for the e2e suites: a small Nest app with one `@OnEvent`
 * handler that reports every delivery to the parent over IPC. Run it as
 * `node -r @swc-node/register test/support/worker-process.ts` with an IPC
 * channel; test/support/processes.ts spawns it and describes the environment.
 */
import 'reflect-metadata';
import { Injectable, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { performance } from 'node:perf_hooks';
import { BatchOptions, ConsumerOptions, EventrailConsumers, EventrailMessage, EventrailModule, OnEvent } from '../../lib';
import { E2E_EVENT, type Delivery, type WorkerCommand, type WorkerMessage } from './processes';

const GROUP = required('WORKER_GROUP');
const PARTITIONS = Number(required('WORKER_PARTITIONS'));
const CONSUMER = JSON.parse(process.env.WORKER_CONSUMER ?? '{}') as ConsumerOptions;
const [DELAY_MIN, DELAY_MAX] = (process.env.WORKER_DELAY_MS ?? '0-0').split('-').map(Number);
const BATCH = process.env.WORKER_BATCH ? (JSON.parse(process.env.WORKER_BATCH) as BatchOptions) : undefined;
/** A batch holding one of these seqs kills its process (SIGKILL, from inside the handler): a poison message. */
const KILL_SEQS = new Set((process.env.WORKER_KILL_SEQS ?? '').split(',').filter(Boolean).map(Number));
const GATE_SEQS = new Set((process.env.WORKER_GATE_SEQS ?? '').split(',').filter(Boolean).map(Number));

/** Opened once by the parent's `open` command; gated handlers wait for it. */
let openGate: () => void = () => undefined;
const gate = new Promise<void>((resolve) => (openGate = resolve));

/**
 * Resolves once the message is written to the IPC pipe. Handlers await it before
 * returning, so a report always reaches the pipe before the offset that covers
 * it is committed, even if the process is SIGKILLed right after.
 */
function report(message: WorkerMessage): Promise<void> {
  if (!process.connected) return Promise.resolve();
  return new Promise((resolve) => process.send?.(message, undefined, {}, () => resolve()));
}

/** Epoch ms with sub-ms resolution, comparable between processes on one host. */
function now(): number {
  return performance.timeOrigin + performance.now();
}

function handlerDelay(): Promise<void> {
  const ms = DELAY_MIN + Math.floor(Math.random() * (DELAY_MAX - DELAY_MIN + 1));
  return ms > 0 ? new Promise((resolve) => setTimeout(resolve, ms)) : Promise.resolve();
}

@Injectable()
class Recorder {
  @OnEvent(E2E_EVENT, GROUP)
  async handle(message: EventrailMessage<{ seq: number }>): Promise<void> {
    const delivery: Delivery = {
      pid: process.pid,
      id: message.id,
      key: message.key,
      seq: message.data.seq,
      partition: message.partition,
      offset: message.offset,
      attempt: message.attempt,
      startedAt: now(),
    };
    await report({ type: 'started', ...delivery });
    await handlerDelay();
    if (GATE_SEQS.has(delivery.seq)) await gate;
    await report({ type: 'handled', ...delivery, endedAt: now() });
  }
}

/** The same, as a batch handler (WORKER_BATCH): every message of a batch is reported started, then handled. */
@Injectable()
class BatchRecorder {
  @OnEvent(E2E_EVENT, { group: GROUP, batch: BATCH ?? {} })
  async handle(messages: EventrailMessage<{ seq: number }>[]): Promise<void> {
    const deliveries = messages.map((message): Delivery => ({
      pid: process.pid,
      id: message.id,
      key: message.key,
      seq: message.data.seq,
      partition: message.partition,
      offset: message.offset,
      attempt: message.attempt,
      startedAt: now(),
    }));
    for (const delivery of deliveries) await report({ type: 'started', ...delivery });
    if (deliveries.some((d) => KILL_SEQS.has(d.seq))) process.kill(process.pid, 'SIGKILL');
    await handlerDelay();
    if (deliveries.some((d) => GATE_SEQS.has(d.seq))) await gate;
    for (const delivery of deliveries) await report({ type: 'handled', ...delivery, endedAt: now() });
  }
}

@Module({
  imports: [EventrailModule.forRoot({ partitions: PARTITIONS, consumer: CONSUMER })],
  providers: [BATCH ? BatchRecorder : Recorder],
})
class WorkerModule {}

async function main(): Promise<void> {
  const app = await NestFactory.createApplicationContext(WorkerModule, { logger: ['log', 'warn', 'error'] });
  // SIGTERM runs Nest's shutdown hooks: consumers finish, commit and release their leases.
  app.enableShutdownHooks();
  const consumers = app.get(EventrailConsumers);

  process.on('message', (command: WorkerCommand) => {
    switch (command.cmd) {
      case 'ownership':
        void report({ type: 'ownership', partitions: consumers.ownership()[GROUP] ?? [] });
        return;
      case 'open':
        openGate();
        return;
    }
  });
  // The test runner is gone: do not linger as an orphan.
  process.on('disconnect', () => process.exit(1));
  await report({ type: 'ready', pid: process.pid, workerId: consumers.workerId });
}

function required(name: string): string {
  const value = process.env[name];
  if (!value) throw new Error(`worker-process: ${name} is not set`);
  return value;
}

main().catch((error: unknown) => {
  console.error('worker-process failed to start:', error);
  process.exit(1);
});
