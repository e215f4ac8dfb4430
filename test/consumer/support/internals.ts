import type { INestApplicationContext } from '@nestjs/common';
import { EventrailConsumers } from '../../../lib';
import type { GroupConsumer } from '../../../lib/consumer/lifecycle/group-consumer';
import type { PartitionWorker } from '../../../lib/consumer/pipeline/partition-worker';

/** `group`'s consumer in `app` (private state of `EventrailConsumers`), for tests that drive a stop or count ticks. */
export function groupConsumer(app: INestApplicationContext, group: string): GroupConsumer {
  const consumers = app.get(EventrailConsumers) as unknown as { groups: Map<string, GroupConsumer> };
  const found = consumers.groups.get(group);
  if (!found) throw new Error(`no group "${group}" in this app`);
  return found;
}

/** The worker of `partition` in `group`'s consumer in `app`, if this process works it. */
export function partitionWorker(app: INestApplicationContext, group: string, partition = 0): PartitionWorker | undefined {
  return (groupConsumer(app, group) as unknown as { workers: Map<number, PartitionWorker> }).workers.get(partition);
}
