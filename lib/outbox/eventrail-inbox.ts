import { Inject, Injectable, Logger, OnApplicationBootstrap, OnModuleDestroy } from '@nestjs/common';
import type { EventrailMessage } from '../events/eventrail-message';
import { InboxTransactionAbortedError } from './errors/inbox-transaction-aborted.error';
import { InvalidOutboxTransactionError } from './errors/invalid-outbox-transaction.error';
import { describeError } from '../util/describe-error';
import { rethrowMissingTable, sqlState } from './missing-table';
import { EVENTRAIL_OUTBOX_OPTIONS } from './outbox.constants';
import type { ResolvedOutboxOptions } from './outbox.options';
import { qualified } from './outbox-schema';

/** PostgreSQL's `in_failed_sql_transaction`: a statement after an error inside the same transaction. */
const IN_FAILED_SQL_TRANSACTION = '25P02';

/** What `handle` did with a message. */
export interface InboxResult<T> {
  /** True when the inbox already had the row: the work was done before and was skipped now. */
  duplicate: boolean;
  /** What `work` returned (undefined for a duplicate). */
  result?: T;
}

/**
 * Exactly-once effects for handlers: the work and an inbox row `(group, event
 * id)` commit in one database transaction, so a redelivered event (a crash
 * before the offset commit, a lease lost mid-batch) finds the row and is skipped.
 */
@Injectable()
export class EventrailInbox implements OnApplicationBootstrap, OnModuleDestroy {
  private readonly logger = new Logger(EventrailInbox.name);
  private pruneTimer?: NodeJS.Timeout;
  private skipped = 0;
  private handled = 0;

  constructor(@Inject(EVENTRAIL_OUTBOX_OPTIONS) private readonly options: ResolvedOutboxOptions) {}

  /**
   * Opens a transaction through the connector, inserts the inbox row of
   * `message` (its group and event id), runs `work(tx)` and commits. When the
   * row exists, `work` is not run and the call resolves with `duplicate: true`:
   * return normally and the message counts as done. When `work` throws, both
   * roll back and the error propagates, so the message follows the group's
   * retry path (and is dead-lettered after the last retry).
   */
  async handle<T, Tx = unknown>(message: Pick<EventrailMessage, 'group' | 'id'>, work: (tx: Tx) => Promise<T>): Promise<InboxResult<T>> {
    if (message === null || typeof message !== 'object' || typeof message.group !== 'string' || typeof message.id !== 'string') {
      throw new InvalidOutboxTransactionError('inbox', 'the EventrailMessage the handler received (with its group and id)');
    }
    const { connector, inboxTable } = this.options;
    const outcome = await connector.transaction(async (tx) => {
      let rows;
      try {
        rows = await connector.execute(
          tx,
          `insert into ${qualified(inboxTable)} (group_name, event_id) values ($1, $2) on conflict do nothing returning 1 as inserted`,
          [message.group, message.id],
        );
      } catch (error) {
        rethrowMissingTable(error, inboxTable);
      }
      // Another worker still holding the same event waits on the unique index until this commits, then sees the row.
      if (rows.length === 0) return { duplicate: true } as InboxResult<T>;
      const result = await work(tx as Tx);
      await this.checkCommittable(connector, tx, message);
      return { duplicate: false, result };
    });
    if (outcome.duplicate) this.skipped++;
    else this.handled++;
    return outcome;
  }

  /**
   * A statement that failed inside `work` and was caught leaves the transaction aborted, and PostgreSQL
   * answers the library's `COMMIT` with `ROLLBACK` without raising: the effect and the row would be gone
   * while `handle` reported success. The row is looked for in the transaction before the commit: an
   * aborted transaction refuses the statement, and one that `work` ended itself no longer holds the row.
   * Throwing here makes the library roll back, so the message is retried.
   */
  private async checkCommittable(
    connector: ResolvedOutboxOptions['connector'],
    tx: unknown,
    message: Pick<EventrailMessage, 'group' | 'id'>,
  ): Promise<void> {
    let rows;
    try {
      rows = await connector.execute(
        tx,
        `select 1 as held from ${qualified(this.options.inboxTable)} where group_name = $1 and event_id = $2`,
        [message.group, message.id],
      );
    } catch (error) {
      if (sqlState(error) === IN_FAILED_SQL_TRANSACTION) {
        throw new InboxTransactionAbortedError(message.group, message.id, 'a statement in work failed and its error was caught', error);
      }
      throw error;
    }
    if (rows.length === 0) {
      throw new InboxTransactionAbortedError(
        message.group,
        message.id,
        'work ended the transaction itself (a commit or rollback inside it)',
      );
    }
  }

  /** Messages handled through the inbox by this process, and redeliveries it skipped. */
  stats(): { handled: number; skippedDuplicates: number } {
    return { handled: this.handled, skippedDuplicates: this.skipped };
  }

  /** Deletes inbox rows older than `inbox.retentionMs`; returns how many. */
  async prune(): Promise<number> {
    const { connector, inboxTable, inbox } = this.options;
    const rows = await connector.query(
      `with gone as (delete from ${qualified(inboxTable)} where handled_at < now() - $1 * interval '1 millisecond' returning 1) select count(*)::int as n from gone`,
      [inbox.retentionMs],
    );
    return Number(rows[0]?.n ?? 0);
  }

  onApplicationBootstrap(): void {
    const every = this.options.inbox.pruneIntervalMs;
    if (every === 0) return;
    this.pruneTimer = setInterval(() => {
      this.prune().then(
        (n) => n > 0 && this.logger.log(`Pruned ${n} inbox row(s) of ${this.options.inboxTable}`),
        (error: unknown) => this.logger.warn(`Inbox pruning of ${this.options.inboxTable} failed: ${describeError(error)}`),
      );
    }, every);
    this.pruneTimer.unref();
  }

  onModuleDestroy(): void {
    clearInterval(this.pruneTimer);
  }
}
