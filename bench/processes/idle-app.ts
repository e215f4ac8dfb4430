// The idle scenario's application: three consumer groups with nothing to do.
// On start it starts the consumers, lets startup settle, then reports the
// process's CPU time over the idle window; afterwards it reports every event
// its groups handle, so the parent can check they are still alive.
import { Inject, Injectable } from '@nestjs/common';
import { setTimeout as sleep } from 'node:timers/promises';
import { EventrailMessage, OnEvent } from '../../lib';
import { childConfig, onCommands, report, runChild } from '../support/children';
import { createEventrailApp, startConsumers } from '../support/eventrail-app';
import { BENCH_EVENT, hostNow } from '../support/payload';
import { IDLE_GROUPS, IdleAppConfig } from '../scenarios/idle';

const ON_HANDLED = Symbol('OnHandled');

@Injectable()
class IdleConsumers {
  constructor(@Inject(ON_HANDLED) private readonly handled: () => void) {}

  @OnEvent(BENCH_EVENT, IDLE_GROUPS[0])
  mailer(_message: EventrailMessage): void {
    this.handled();
  }

  @OnEvent(BENCH_EVENT, IDLE_GROUPS[1])
  ledger(_message: EventrailMessage): void {
    this.handled();
  }

  @OnEvent(BENCH_EVENT, IDLE_GROUPS[2])
  audit(_message: EventrailMessage): void {
    this.handled();
  }
}

async function main(): Promise<void> {
  const config = childConfig<IdleAppConfig>();
  let handled = 0;
  const onHandled = (): void => report({ type: 'progress', handled: ++handled, lastAt: hostNow() });
  const app = await createEventrailApp({
    url: config.url,
    prefix: config.prefix,
    partitions: config.partitions,
    providers: [IdleConsumers, { provide: ON_HANDLED, useValue: onHandled }],
  });
  onCommands({
    start: async () => {
      await startConsumers(app);
      await sleep(config.settleMs);
      report({ type: 'window-open' });
      const cpu = process.cpuUsage();
      const started = performance.now();
      await sleep(config.windowMs);
      const used = process.cpuUsage(cpu);
      report({ type: 'window-closed', cpuMicros: used.user + used.system, elapsedMs: performance.now() - started });
    },
    stop: async () => {
      await app.close();
      process.exit(0);
    },
  });
}

runChild(main);
