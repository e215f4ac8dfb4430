/**
 * Jest `setupFiles` entry: library logs are off in tests unless
 * EVENTRAIL_TEST_LOGS=1. The suites provoke failures on purpose (dead letters,
 * archives that cannot be written, a health check that is down), and their
 * ERROR lines would bury the results.
 *
 * Only the default output goes: a test that checks what is logged installs its
 * own logger (`app.useLogger(...)`) after compiling, which still receives every
 * message, and spies on `Logger.prototype` still see every call. Worker
 * processes keep logging: their output is collected, not printed, and some
 * tests read it.
 */
import { ConsoleLogger, Logger } from '@nestjs/common';
import { Test } from '@nestjs/testing';

if (process.env.EVENTRAIL_TEST_LOGS !== '1') {
  // No level enabled, so it prints nothing and Logger.isLevelEnabled() is false for every level.
  const silent = new ConsoleLogger({ logLevels: [] });
  // Classes built directly in a test, outside any Nest app, log through Nest's default logger.
  Logger.overrideLogger(silent);
  // compile() installs Nest's TestingLogger, which prints errors, unless the builder was given a logger.
  const createTestingModule = Test.createTestingModule.bind(Test);
  Test.createTestingModule = (...args: Parameters<typeof Test.createTestingModule>) => createTestingModule(...args).setLogger(silent);
}
