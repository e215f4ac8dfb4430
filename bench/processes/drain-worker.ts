// A worker process of the two-process drain: consumes group "bench" with the
// given partitions and concurrency once the parent says start, and reports how
// many events it handled and when the last one was.
import { createEventrailApp, startConsumers } from '../support/eventrail-app';
import { childConfig, onCommands, report, runChild } from '../support/children';
import { hostNow } from '../support/payload';

export interface DrainWorkerConfig {
  url: string;
  prefix: string;
  partitions: number;
  concurrency: number;
}

async function main(): Promise<void> {
  const config = childConfig<DrainWorkerConfig>();
  let handled = 0;
  let lastAt = 0;
  let reported = -1;
  const app = await createEventrailApp({
    url: config.url,
    prefix: config.prefix,
    partitions: config.partitions,
    consumer: { concurrency: config.concurrency },
    handler: async () => {
      handled++;
      lastAt = hostNow();
    },
  });
  const progress = (): void => {
    if (handled === reported) return;
    reported = handled;
    report({ type: 'progress', handled, lastAt });
  };
  let timer: NodeJS.Timeout | undefined;
  onCommands({
    start: async () => {
      timer = setInterval(progress, 20);
      await startConsumers(app);
    },
    stop: async () => {
      clearInterval(timer);
      progress();
      await app.close();
      process.exit(0);
    },
  });
}

runChild(main);
