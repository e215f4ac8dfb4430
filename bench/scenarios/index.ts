import type { ScenarioFactory } from '../support/scenario';
import { batchHandlers } from './batch-handlers';
import { cluster } from './cluster';
import { drain } from './drain';
import { groups } from './groups';
import { idle } from './idle';
import { lagCost } from './lag-cost';
import { latency } from './latency';
import { listLock } from './list-lock';
import { memory } from './memory';
import { outboxLatency, outboxRelay } from './outbox';
import { parkedKeys } from './parked-keys';
import { publishBatch } from './publish-batch';
import { publishCallers } from './publish-callers';
import { scaling, scalingDrain } from './scaling';
import { waitingHandlers } from './waiting-handlers';

/** Every scenario, in the order they run and are reported. */
export const scenarioFactories: ScenarioFactory[] = [
  publishBatch,
  publishCallers,
  drain,
  waitingHandlers,
  latency,
  memory,
  idle,
  listLock,
  cluster,
  batchHandlers,
  parkedKeys,
  lagCost,
  scaling,
  scalingDrain,
  groups,
  outboxRelay,
  outboxLatency,
];
