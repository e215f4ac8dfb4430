import Redis, { type RedisOptions } from 'ioredis';
import { RedisTlsError } from '../errors/redis-tls.error';

/** What OpenSSL reports when it cannot verify a peer certificate (Node's `error.code`). */
const CERTIFICATE_CODES = new Set([
  'UNABLE_TO_GET_ISSUER_CERT',
  'UNABLE_TO_GET_ISSUER_CERT_LOCALLY',
  'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
  'UNABLE_TO_DECRYPT_CERT_SIGNATURE',
  'UNABLE_TO_DECODE_ISSUER_PUBLIC_KEY',
  'CERT_SIGNATURE_FAILURE',
  'CERT_NOT_YET_VALID',
  'CERT_HAS_EXPIRED',
  'DEPTH_ZERO_SELF_SIGNED_CERT',
  'SELF_SIGNED_CERT_IN_CHAIN',
  'CERT_CHAIN_TOO_LONG',
  'CERT_REVOKED',
  'INVALID_CA',
  'INVALID_PURPOSE',
  'CERT_UNTRUSTED',
  'CERT_REJECTED',
  'HOSTNAME_MISMATCH',
  'ERR_TLS_CERT_ALTNAME_INVALID',
]);

/**
 * The error a connection attempt reported, as a `RedisTlsError` when no retry
 * can fix it (an untrusted or mismatched certificate, a port without TLS), or
 * undefined for what reconnecting may cure (refused, reset, timed out). A
 * missing client certificate usually arrives as the server's TLS 1.3 alert
 * (`ERR_SSL_TLSV13_ALERT_CERTIFICATE_REQUIRED`), but may come as a bare
 * `ECONNRESET` when the reset overtakes the alert; that one is retried.
 */
export function permanentConnectionFailure(error: unknown, node: string): RedisTlsError | undefined {
  // A cluster client reports "Failed to refresh slots cache." and keeps the node's own error beside it.
  const nodeError = (error as { lastNodeError?: unknown } | null)?.lastNodeError;
  if (nodeError !== undefined) return permanentConnectionFailure(nodeError, node);
  // Duck-typed: a socket error from another realm (a test runner's sandbox) is no `instanceof Error` here.
  const { code, message } = (error ?? {}) as { code?: unknown; message?: unknown };
  if (typeof code !== 'string' || typeof message !== 'string') return undefined;
  if (CERTIFICATE_CODES.has(code) || code.startsWith('ERR_SSL_')) return new RedisTlsError(node, code, error as Error);
  return undefined;
}

/**
 * The cluster client asks each seed on a connection whose errors it drops, so
 * an unreachable seed only says "Connection is closed." (and the cluster
 * "Failed to refresh slots cache."). One plain connection per seed, with the
 * cluster's node options, learns why (ECONNREFUSED, ENOTFOUND, a TLS
 * failure); the first seed's reason is reported.
 */
export async function firstSeedError(
  nodes: ReadonlyArray<{ host: string; port: number }>,
  redisOptions: RedisOptions,
  timeoutMs: number,
): Promise<Error | undefined> {
  const errors = await Promise.all(
    nodes.map(async ({ host, port }) => {
      const probe = new Redis({ ...redisOptions, host, port, lazyConnect: true, connectTimeout: timeoutMs, retryStrategy: () => null });
      let failure: Error | undefined;
      probe.on('error', (error: Error) => (failure ??= error));
      try {
        await probe.connect();
        return undefined;
      } catch (error) {
        return failure ?? (error as Error);
      } finally {
        probe.disconnect();
      }
    }),
  );
  return errors.find((error) => error !== undefined);
}
