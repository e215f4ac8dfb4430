/** One row of a result, as the driver returns it (bigint columns as strings). */
export type Row = Record<string, unknown>;

/**
 * What the outbox needs from the app's database library, on PostgreSQL. `Tx` is
 * that library's transaction handle: a `pg` `PoolClient` inside `BEGIN`, a
 * TypeORM `EntityManager`, a Kysely `Transaction`, a Drizzle `tx`.
 *
 * SQL is written with `$1, $2, ...` placeholders, each used once and in order,
 * so every connector can hand it to its library as it is.
 */
export interface OutboxConnector<Tx = unknown> {
  /** `pg`, `typeorm`, `kysely`, `drizzle`, ... (in errors and logs). */
  readonly name: string;
  /** Runs one statement inside the caller's transaction. */
  execute(tx: Tx, sql: string, params: readonly unknown[]): Promise<Row[]>;
  /** Runs `work` in a new transaction: commits when it resolves, rolls back when it throws. */
  transaction<T>(work: (tx: Tx) => Promise<T>): Promise<T>;
  /** Runs one statement on its own (schema, admin reads, pruning). */
  query(sql: string, params?: readonly unknown[]): Promise<Row[]>;
  /**
   * The most connections the pool that `session()` takes its connection from holds, when known: the
   * relay refuses a pool of one, which its session would leave empty for publish and the inbox.
   */
  readonly poolMax?: number;
  /** A connection of the relay's own, held for as long as it is active (its advisory lock and `LISTEN`). */
  session(): Promise<RelaySession>;
}

/** A dedicated database session: a session-level advisory lock lives exactly as long as it. */
export interface RelaySession {
  query(sql: string, params?: readonly unknown[]): Promise<Row[]>;
  /**
   * `LISTEN`s on `channel` and calls `onNotify` for each notification; resolves
   * false when this connector cannot receive notifications (the relay then
   * relies on polling alone).
   */
  listen(channel: string, onNotify: () => void): Promise<boolean>;
  /** `onLost` is called once if the connection fails. */
  onLost(onLost: (error: Error) => void): void;
  /**
   * Closes the connection rather than returning it to a pool: a session-level
   * lock must never outlive the relay that took it inside a pooled connection.
   */
  close(): Promise<void>;
}
