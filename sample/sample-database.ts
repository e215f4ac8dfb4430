import { PGlite } from '@electric-sql/pglite';
import { Logger, OnApplicationShutdown } from '@nestjs/common';
import { Pool } from 'pg';
import type { OutboxConnector } from 'nestjs-eventrail/outbox';
import { pgConnector, pgliteConnector } from 'nestjs-eventrail/outbox';

/** What the sample's SQL needs from a transaction: `pg`'s `PoolClient` and PGlite's `tx` both have it. */
export interface SqlTransaction {
  query<R = Record<string, unknown>>(sql: string, params?: unknown[]): Promise<{ rows: R[] }>;
}

/** The sample's tables; the outbox's own come from `ensureSchema`. */
const SCHEMA = `
create table if not exists orders (id serial primary key, customer text not null, amount_cents integer not null, created_at timestamptz not null default now());
create table if not exists invoices (order_id integer primary key, customer text not null, amount_cents integer not null, billed_at timestamptz not null default now());
`;

/**
 * The sample's database: PostgreSQL at DATABASE_URL, or, without it, an
 * embedded one (PGlite, in memory), so `npm run sample` needs nothing but Redis.
 * Either way the outbox gets the matching connector.
 */
export class SampleDatabase implements OnApplicationShutdown {
  /** Use `SampleDatabase.open()`. */
  constructor(
    readonly connector: OutboxConnector<SqlTransaction>,
    readonly kind: string,
    private readonly closeDatabase: () => Promise<void>,
  ) {}

  static async open(url = process.env.DATABASE_URL): Promise<SampleDatabase> {
    let database: SampleDatabase;
    if (url) {
      const pool = new Pool({ connectionString: url, max: 10 });
      database = new SampleDatabase(pgConnector(pool) as OutboxConnector<SqlTransaction>, 'PostgreSQL (DATABASE_URL)', () => pool.end());
    } else {
      const db = new PGlite();
      database = new SampleDatabase(pgliteConnector(db) as OutboxConnector<SqlTransaction>, 'embedded PGlite (in memory)', () =>
        db.close(),
      );
    }
    await database.connector.query(SCHEMA);
    new Logger('SampleDatabase').log(`Orders and invoices in ${database.kind}`);
    return database;
  }

  transaction<T>(work: (tx: SqlTransaction) => Promise<T>): Promise<T> {
    return this.connector.transaction(work);
  }

  async query<R = Record<string, unknown>>(sql: string, params: unknown[] = []): Promise<R[]> {
    return (await this.connector.query(sql, params)) as R[];
  }

  /** After the outbox relay and the consumers stopped (they stop in onModuleDestroy). */
  async onApplicationShutdown(): Promise<void> {
    await this.closeDatabase();
  }
}
