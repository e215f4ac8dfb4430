// The scaling scenario's application: `groups` consumer groups over
// `partitions` partitions, each with a no-op handler. Its consumers start on
// the parent's "start" (reported as window-open once started), so the parent
// times joins and leaves; "stop" is a graceful shutdown (leases released).
import { Injectable, Type } from '@nestjs/common';
import { OnEvent } from '../../lib';
import { childConfig, onCommands, report, runChild } from '../support/children';
import { createEventrailApp, startConsumers } from '../support/eventrail-app';
import { BENCH_EVENT } from '../support/payload';
import { scaleGroups, ScaleAppConfig } from '../scenarios/scaling';

/** A handler class of its own per group: the decorator takes the group name when the class is made. */
function groupConsumer(group: string): Type<unknown> {
  @Injectable()
  class GroupConsumer {
    @OnEvent(BENCH_EVENT, group)
    handle(): void {}
  }
  return GroupConsumer;
}

async function main(): Promise<void> {
  const config = childConfig<ScaleAppConfig>();
  const app = await createEventrailApp({
    url: config.url,
    prefix: config.prefix,
    partitions: config.partitions,
    providers: scaleGroups(config.groups).map(groupConsumer),
  });
  onCommands({
    start: async () => {
      await startConsumers(app);
      report({ type: 'window-open' });
    },
    stop: async () => {
      await app.close();
      process.exit(0);
    },
  });
}

runChild(main);
