import type { Config } from 'jest';

// NestJS 12 ships ESM only; @swc/jest compiles it (and our TypeScript, with
// decorator metadata) to CommonJS so Jest can load it on Node 20.
const swc = [
  '@swc/jest',
  {
    jsc: {
      target: 'es2022',
      parser: { syntax: 'typescript', decorators: true },
      transform: { legacyDecorator: true, decoratorMetadata: true },
    },
    module: { type: 'commonjs' },
  },
];

const config: Config = {
  rootDir: '.',
  testMatch: ['<rootDir>/test/**/*.spec.ts'],
  transform: { '^.+\\.(t|j|mj)s$': swc as never },
  transformIgnorePatterns: ['/node_modules/(?!(@nestjs|uid|load-esm|file-type|strtok3|token-types|peek-readable|@tokenizer)/)'],
  moduleFileExtensions: ['ts', 'js', 'mjs', 'json'],
  // The sample's e2e test imports the package by name, as a user's tests would (tsconfig.json's paths, for Jest).
  moduleNameMapper: {
    '^nestjs-eventrail$': '<rootDir>/lib/index.ts',
    '^nestjs-eventrail/(health|prometheus|testing|microservices|outbox)$': '<rootDir>/lib/$1',
  },
  // Library logs off unless EVENTRAIL_TEST_LOGS=1.
  setupFiles: ['<rootDir>/test/support/quiet-logs.ts'],
  globalSetup: '<rootDir>/test/support/global-setup.ts',
  globalTeardown: '<rootDir>/test/support/global-teardown.ts',
  testTimeout: 60_000,
  // Child processes and Redis connections are closed by each test; this only guards CI against a hang.
  forceExit: true,
};

export default config;
