import { Logger } from '@nestjs/common';

/** The part of a node-postgres `Pool` the guard uses. */
export interface ClientEvents {
  on(event: 'acquire', listener: (client: ErrorEmitter) => void): unknown;
  on(event: 'error', listener: (error: Error) => void): unknown;
}

/** Anything that emits `error` (a node-postgres client). */
export interface ErrorEmitter {
  on(event: 'error', listener: (error: Error) => void): unknown;
}

const guarded = new WeakSet<object>();
const logger = new Logger('EventrailOutbox');

/**
 * A node-postgres client checked out of its pool has no `error` listener: a connection that fails while
 * it sits idle inside a transaction (a restart, a failover, `pg_terminate_backend`) emits an `error` event
 * nobody handles, and Node ends the process. Every client this pool hands out gets a listener that only
 * logs; the transaction's next statement fails with the connection's error, which fails that one
 * operation, and the pool discards the dead client on release. A client the inbox or the outbox released
 * fails too while it waits idle in the pool, and the pool re-emits that as its own `error`: with no
 * listener of the app's, that too would end the process, so the pool gets one that only logs.
 */
export function guardPoolClients(pool: ClientEvents): void {
  if (guarded.has(pool)) return;
  guarded.add(pool);
  pool.on('acquire', (client) => guardClient(client));
  pool.on('error', (error) => logger.warn(`An idle database connection of the pool failed: ${error.message}`));
}

/** The same listener on one client (a transaction handle the app passed in). */
export function guardClient(client: ErrorEmitter): void {
  if (guarded.has(client)) return;
  guarded.add(client);
  client.on('error', (error) => logger.warn(`A database connection in use by a transaction failed: ${error.message}`));
}
