// `nestjs-eventrail/testing`: helpers for testing an app's handlers against a real Redis.
// Loaded only by tests; the main entry point never imports it.
export { freePort, startRedisServer, waitUntilAnswers } from './testing/redis-server';
export type { RedisServer, StartRedisServerOptions } from './testing/redis-server';
export { createTestPrefix, deletePrefix, uniquePrefix } from './testing/test-prefix';
export type { TestPrefix } from './testing/test-prefix';
