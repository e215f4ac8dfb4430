import { Inject, Injectable, Logger, OnModuleInit } from '@nestjs/common';
import { EVENTRAIL_OPTIONS } from '../config/eventrail.constants';
import type { ResolvedLogOptions } from '../config/log.options';
import { EVENTRAIL_OUTBOX_OPTIONS } from './outbox.constants';
import type { ResolvedOutboxOptions } from './outbox.options';
import { migrationSql } from './outbox-schema';
import { checkOutboxSchema } from './outbox-schema.check';

/**
 * Runs the DDL at startup with `ensureSchema: true`, before the relay starts (which is on bootstrap),
 * then checks the tables' shape either way, so a table of another shape is refused at startup by name.
 */
@Injectable()
export class OutboxSchemaSetup implements OnModuleInit {
  private readonly logger = new Logger(OutboxSchemaSetup.name);

  constructor(
    @Inject(EVENTRAIL_OUTBOX_OPTIONS) private readonly options: ResolvedOutboxOptions,
    @Inject(EVENTRAIL_OPTIONS) private readonly eventrail: Pick<ResolvedLogOptions, 'prefix'>,
  ) {}

  async onModuleInit(): Promise<void> {
    const { ensureSchema, connector, outboxTable, inboxTable } = this.options;
    const check = (): Promise<void> =>
      checkOutboxSchema((sql, params) => connector.query(sql, params), { outbox: outboxTable, inbox: inboxTable });
    if (ensureSchema) {
      try {
        // The first log set up on a table owns the rows written there without a log.
        await connector.query(migrationSql({ outbox: outboxTable, inbox: inboxTable }, this.eventrail.prefix));
      } catch (error) {
        // The DDL trips over a table of another shape (an index on a missing column): say what differs instead.
        await check();
        throw error;
      }
    }
    await check();
    if (ensureSchema) this.logger.log(`Outbox schema ready (${outboxTable}, ${inboxTable})`);
  }
}
