// A BullMQ worker process of the two-process BullMQ drain: runs a Worker at the given concurrency
// once the parent says start, and reports how many jobs it handled and when the last one was.
import { createWorker, runWorker } from '../support/bullmq';
import { childConfig, onCommands, report, runChild } from '../support/children';
import { hostNow } from '../support/payload';

export interface BullmqWorkerConfig {
  url: string;
  prefix: string;
  concurrency: number;
}

async function main(): Promise<void> {
  const config = childConfig<BullmqWorkerConfig>();
  let handled = 0;
  let lastAt = 0;
  let reported = -1;
  const worker = createWorker(config.url, config.prefix, config.concurrency, async () => {
    handled++;
    lastAt = hostNow();
  });
  await worker.waitUntilReady();
  const progress = (): void => {
    if (handled === reported) return;
    reported = handled;
    report({ type: 'progress', handled, lastAt });
  };
  let timer: NodeJS.Timeout | undefined;
  onCommands({
    start: async () => {
      timer = setInterval(progress, 20);
      runWorker(worker);
    },
    stop: async () => {
      clearInterval(timer);
      progress();
      await worker.close();
      process.exit(0);
    },
  });
}

runChild(main);
