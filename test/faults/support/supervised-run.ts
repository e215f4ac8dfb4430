import type { INestApplicationContext } from '@nestjs/common';
import type { Supervisor } from './supervisor';

/** What a supervised test leaves running: its worker processes and its own app (publisher, admin). */
export interface SupervisedRun {
  supervisor?: Supervisor;
  app?: INestApplicationContext;
}

/**
 * Call once in a `describe`: returns the holder a test puts its supervisor and
 * app in, and after each test stops the workers first (nothing restarts them
 * any more), then closes the app.
 */
export function useSupervisedRun(): SupervisedRun {
  const current: SupervisedRun = {};
  afterEach(async () => {
    await current.supervisor?.stop();
    current.supervisor = undefined;
    await current.app?.close();
    current.app = undefined;
  });
  return current;
}
