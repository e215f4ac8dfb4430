import { EventrailError } from './eventrail.error';

/**
 * Throw this (or a subclass) from a handler when retrying cannot help, for
 * example a payload that fails validation. The message is given up at once
 * instead of after `maxRetries`.
 */
export class NonRetryableError extends EventrailError {}
