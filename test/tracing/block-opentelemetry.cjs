// Preloaded with `node -r` by without-opentelemetry.int.spec.ts: makes @opentelemetry/api look not installed
// (MODULE_NOT_FOUND, as Node reports a missing package) and records every attempt to load it.
const Module = require('node:module');
const resolve = Module._resolveFilename;
globalThis.openTelemetryRequests = [];
Module._resolveFilename = function (request, ...rest) {
  if (request === '@opentelemetry/api' || request.startsWith('@opentelemetry/')) {
    globalThis.openTelemetryRequests.push(request);
    const error = new Error(`Cannot find module '${request}'`);
    error.code = 'MODULE_NOT_FOUND';
    throw error;
  }
  return resolve.call(this, request, ...rest);
};
