import { Job, JobsOptions, Queue, Worker } from 'bullmq';
import { BENCH_EVENT, BenchPayload, PAYLOAD } from './payload';
import { connectionOptions } from './redis-tools';

/** The queue every BullMQ reference uses; its keys live under the run's prefix. */
export const QUEUE_NAME = 'bench';

/**
 * Job options of every BullMQ reference: completed jobs are removed, as an
 * application that uses BullMQ to move events would configure it (otherwise
 * Redis keeps every finished job).
 */
export const JOB_OPTIONS: JobsOptions = { removeOnComplete: true };

export function createQueue(url: string, prefix: string): Queue {
  return new Queue(QUEUE_NAME, { connection: connectionOptions(url), prefix });
}

/**
 * A worker that does not start until `run()` is called; `processor` is the
 * handler under test.
 */
export function createWorker(
  url: string,
  prefix: string,
  concurrency: number,
  processor: (job: Job<BenchPayload>) => Promise<void>,
): Worker {
  return new Worker<BenchPayload>(QUEUE_NAME, processor, { connection: connectionOptions(url), prefix, concurrency, autorun: false });
}

/** Adds `count` jobs with `addBulk`, 1000 a call. */
export async function fillQueue(queue: Queue, count: number): Promise<void> {
  for (let from = 0; from < count; from += 1000) {
    const size = Math.min(1000, count - from);
    await queue.addBulk(Array.from({ length: size }, () => ({ name: BENCH_EVENT, data: PAYLOAD, opts: JOB_OPTIONS })));
  }
}

/** Starts the worker and reports a start failure instead of leaving it unhandled. */
export function runWorker(worker: Worker): void {
  worker.run().catch((error: unknown) => {
    console.error(`BullMQ worker stopped: ${(error as Error).message}`);
  });
}
