import type { Row, RelaySession } from './outbox-connector';

/** The part of a node-postgres client the relay uses (a `pg` `PoolClient`, or what TypeORM and Drizzle hold). */
export interface NodePgClient {
  query(sql: string, params?: unknown[]): Promise<{ rows: Row[] }>;
  on(event: 'notification', listener: (message: { channel: string }) => void): unknown;
  on(event: 'error' | 'end', listener: (error?: Error) => void): unknown;
}

/**
 * A relay session over one node-postgres connection; `destroy` closes it
 * (for a pool: releases it with an error, which makes the pool discard it).
 */
export function nodePgSession(client: NodePgClient, destroy: () => void | Promise<void>): RelaySession {
  let lost: ((error: Error) => void) | undefined;
  let closed = false;
  let inFlight = 0;
  const fail = (error?: Error): void => {
    if (closed) return;
    closed = true;
    lost?.(error ?? new Error('the relay connection ended'));
  };
  client.on('error', fail);
  client.on('end', fail);
  return {
    async query(sql, params = []) {
      inFlight++;
      try {
        return (await client.query(sql, [...params])).rows;
      } finally {
        inFlight--;
      }
    },
    async listen(channel, onNotify) {
      client.on('notification', (message) => {
        if (message.channel === channel) onNotify();
      });
      await client.query(`listen ${quoteIdentifier(channel)}`);
      return true;
    },
    onLost(onLost) {
      lost = onLost;
    },
    async close() {
      // Unlock first, so a successor takes over now rather than once the server has noticed the closed
      // socket; not while a query is running (a standby waiting for the lock), which it would queue behind.
      if (!closed && inFlight === 0) await client.query('select pg_advisory_unlock_all()').catch(() => undefined);
      closed = true;
      await destroy();
    },
  };
}

/** `"name"`, with any `"` doubled: a channel or table name inside SQL. */
export function quoteIdentifier(name: string): string {
  return `"${name.replace(/"/g, '""')}"`;
}
