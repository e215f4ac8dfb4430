import { Inject, Injectable } from '@nestjs/common';
import { rethrowMissingTable } from './missing-table';
import { EVENTRAIL_OUTBOX_OPTIONS } from './outbox.constants';
import type { ResolvedOutboxOptions } from './outbox.options';
import { EventrailOutboxRelay, type OutboxRelayStats } from './outbox-relay';
import { readOutboxStatus, type OutboxStatus } from './outbox-status.reader';

/** The outbox as operations see it: depth and age from the table, and this process's relay. */
export interface OutboxOverview extends OutboxStatus {
  relay: OutboxRelayStats & { enabled: boolean };
}

/** Read side of the outbox for health checks, metrics and the CLI. */
@Injectable()
export class EventrailOutboxAdmin {
  constructor(
    @Inject(EVENTRAIL_OUTBOX_OPTIONS) private readonly options: ResolvedOutboxOptions,
    private readonly relay: EventrailOutboxRelay,
  ) {}

  /** Outbox depth, failed rows and the oldest waiting row's age, with this process's relay stats. */
  async status(): Promise<OutboxOverview> {
    const { connector, outboxTable, relay } = this.options;
    let status: OutboxStatus;
    try {
      status = await readOutboxStatus((sql, params) => connector.query(sql, params), outboxTable);
    } catch (error) {
      rethrowMissingTable(error, outboxTable);
    }
    return { ...status, relay: { enabled: relay.enabled, ...this.relay.stats() } };
  }
}
