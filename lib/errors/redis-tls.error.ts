import { RedisUnavailableError } from './redis-unavailable.error';

/**
 * The TLS handshake with Redis failed in a way no retry fixes: the server's
 * certificate is not signed by a CA in `tls.ca` (or the system's), names
 * another host, has expired, the server wants a client certificate that was
 * not given, or it speaks no TLS there. Startup fails
 * with it at the first attempt instead of waiting for `startupTimeoutMs`, even
 * with `allowDegradedStart`. A subclass of `RedisUnavailableError`, so code
 * that catches that one catches this too.
 */
export class RedisTlsError extends RedisUnavailableError {
  constructor(
    /** `host:port` that was dialled. */
    readonly node: string,
    /** Node's code for the failure (`SELF_SIGNED_CERT_IN_CHAIN`, `ERR_TLS_CERT_ALTNAME_INVALID`, ...). */
    readonly code: string,
    cause: Error,
  ) {
    super(`TLS handshake with ${node} failed (${code}): ${hint(code)}`, cause);
  }
}

function hint(code: string): string {
  if (code === 'ERR_TLS_CERT_ALTNAME_INVALID' || code === 'HOSTNAME_MISMATCH')
    return 'The certificate names another host: connect by a name it lists, or set tls.servername';
  if (code === 'CERT_HAS_EXPIRED' || code === 'CERT_NOT_YET_VALID') return 'The server certificate is outside its validity period';
  if (code.includes('CERTIFICATE_REQUIRED'))
    return 'The server asks for a client certificate: pass tls.cert and tls.key (CLI: --tls-cert, --tls-key)';
  if (code.startsWith('ERR_SSL_'))
    return 'Check that this port serves TLS (redis-server --tls-port) and the TLS versions both sides accept';
  return "The server's certificate does not chain to a trusted CA: pass the CA that signed it as tls.ca (CLI: --tls-ca)";
}
