// @ts-check
import js from '@eslint/js';
import prettier from 'eslint-config-prettier/flat';
import { defineConfig } from 'eslint/config';
import tseslint from 'typescript-eslint';

// Node's CommonJS globals, for the plain scripts (no `globals` dependency needed for this handful).
const nodeCommonJsGlobals = {
  require: 'readonly',
  module: 'writable',
  exports: 'writable',
  __dirname: 'readonly',
  __filename: 'readonly',
  process: 'readonly',
  console: 'readonly',
  Buffer: 'readonly',
  setTimeout: 'readonly',
  clearTimeout: 'readonly',
  setInterval: 'readonly',
  clearInterval: 'readonly',
  setImmediate: 'readonly',
  URL: 'readonly',
};

export default defineConfig(
  { ignores: ['dist/', 'dist-sample/', 'node_modules/', 'coverage/', 'bench/results/', 'test/artifacts/'] },
  js.configs.recommended,
  tseslint.configs.recommended,
  {
    files: ['**/*.ts'],
    rules: {
      // `_`-prefixed names mark parameters kept for a signature.
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
    },
  },
  {
    // Type-aware promise rules: no promise left floating (an unhandled rejection would end the
    // process), none passed where a callback's return is ignored, and `await` only on what can be awaited.
    files: ['**/*.ts'],
    languageOptions: { parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname } },
    rules: {
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/no-misused-promises': 'error',
      '@typescript-eslint/await-thenable': 'error',
    },
  },
  {
    files: ['scripts/**/*.js', '**/*.cjs'],
    languageOptions: { sourceType: 'commonjs', globals: nodeCommonJsGlobals },
    rules: {
      // Plain CommonJS scripts: require() is how they load modules.
      '@typescript-eslint/no-require-imports': 'off',
    },
  },
  // Last: turns off the stylistic rules that Prettier owns.
  prettier,
);
