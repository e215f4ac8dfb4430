import { Inject, Injectable, Logger, OnModuleInit } from '@nestjs/common';
import { EVENTRAIL_OUTBOX_OPTIONS } from './outbox.constants';
import type { ResolvedOutboxOptions } from './outbox.options';
import { migrationSql } from './outbox-schema';

/** Runs the DDL at startup with `ensureSchema: true`, before the relay starts (which is on bootstrap). */
@Injectable()
export class OutboxSchemaSetup implements OnModuleInit {
  private readonly logger = new Logger(OutboxSchemaSetup.name);

  constructor(@Inject(EVENTRAIL_OUTBOX_OPTIONS) private readonly options: ResolvedOutboxOptions) {}

  async onModuleInit(): Promise<void> {
    const { ensureSchema, connector, outboxTable, inboxTable } = this.options;
    if (!ensureSchema) return;
    await connector.query(migrationSql({ outbox: outboxTable, inbox: inboxTable }));
    this.logger.log(`Outbox schema ready (${outboxTable}, ${inboxTable})`);
  }
}
