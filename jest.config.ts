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

// CI's NestJS 11 run (scripts/matrix.sh nest11 prints the dir): Nest's packages load from that
// side-by-side install instead of the project's Nest 12, while rxjs and reflect-metadata stay the
// project's single copies, as in an app (the install leaves them out).
const nest11 = process.env.EVENTRAIL_NEST11_DIR;
const nest11Mapper: Record<string, string> = nest11
  ? {
      '^@nestjs/(common|core|testing|microservices|platform-express|platform-fastify|schedule|terminus)(/.*)?$': `${nest11}/node_modules/@nestjs/$1$2`,
      '^(rxjs|reflect-metadata)(/.*)?$': '<rootDir>/node_modules/$1$2',
    }
  : {};

const config: Config = {
  rootDir: '.',
  testMatch: ['<rootDir>/test/**/*.spec.ts'],
  transform: { '^.+\\.(t|j|mj)s$': swc as never },
  transformIgnorePatterns: ['/node_modules/(?!(@nestjs|uid|load-esm|file-type|strtok3|token-types|peek-readable|@tokenizer)/)'],
  moduleFileExtensions: ['ts', 'js', 'mjs', 'json'],
  // The sample's e2e test imports the package by name, as a user's tests would (tsconfig.json's paths, for Jest).
  moduleNameMapper: {
    ...nest11Mapper,
    '^nestjs-eventrail$': '<rootDir>/lib/index.ts',
    '^nestjs-eventrail/(health|prometheus|testing|microservices|outbox)$': '<rootDir>/lib/$1',
  },
  // Library logs off unless EVENTRAIL_TEST_LOGS=1.
  // closed-connection-trace: diagnosis only (which commands a closing connection failed, and who closed it).
  setupFiles: ['<rootDir>/test/support/quiet-logs.ts', '<rootDir>/test/support/closed-connection-trace.ts'],
  globalSetup: '<rootDir>/test/support/global-setup.ts',
  // Jest's order, or the reverse for one of CI's two lanes (see the file).
  testSequencer: '<rootDir>/test/support/test-order.cjs',
  globalTeardown: '<rootDir>/test/support/global-teardown.ts',
  testTimeout: 60_000,
  // Child processes and Redis connections are closed by each test; this only guards CI against a hang.
  forceExit: true,
};

export default config;
