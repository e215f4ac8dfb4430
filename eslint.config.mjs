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
