import { UnauthorizedException } from '@nestjs/common';
import { createHash, timingSafeEqual } from 'node:crypto';

const BEARER = /^Bearer\s+(\S+)\s*$/i;

/**
 * The bearer-token check of the HTTP fronts (dashboard API, CloudEvents
 * ingress): one place that compares a presented `Authorization: Bearer`
 * token with the configured one.
 */
export class BearerToken {
  private readonly digest: Buffer;

  constructor(token: string) {
    this.digest = digest(token);
  }

  /** The check of a configured token, or null where none is configured. */
  static of(token: string | null): BearerToken | null {
    return token === null ? null : new BearerToken(token);
  }

  /**
   * Passes when `authorization` carries the token. Otherwise calls
   * `challenge` (to set `WWW-Authenticate` on the response) and throws 401.
   */
  verify(authorization: string | undefined, challenge: (name: string, value: string) => void): void {
    const presented = authorization ? BEARER.exec(authorization)?.[1] : undefined;
    // Hashing first gives both sides the same length, so the comparison time says nothing about the token.
    if (presented !== undefined && timingSafeEqual(digest(presented), this.digest)) return;
    challenge('WWW-Authenticate', 'Bearer realm="eventrail"');
    throw new UnauthorizedException(authorization ? 'Invalid bearer token' : 'Missing bearer token: send Authorization: Bearer <token>');
  }
}

function digest(value: string): Buffer {
  return createHash('sha256').update(value).digest();
}
