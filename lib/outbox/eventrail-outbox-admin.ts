import { Inject, Injectable } from '@nestjs/common';
import { EVENTRAIL_OPTIONS } from '../config/eventrail.constants';
import type { ResolvedLogOptions } from '../config/log.options';
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
    @Inject(EVENTRAIL_OPTIONS) private readonly eventrail: Pick<ResolvedLogOptions, 'prefix'>,
  ) {}

  /**
   * Outbox depth, failed rows and the oldest waiting row's age, with this process's relay stats. Only this
   * log's rows count (and the rows without a log when it owns them), so a table shared with another log
   * shows each log its own backlog, as `maxOutboxAgeMs` health needs.
   */
  async status(): Promise<OutboxOverview> {
    const { connector, outboxTable, relay } = this.options;
    let status: OutboxStatus;
    try {
      status = await readOutboxStatus((sql, params) => connector.query(sql, params), outboxTable, this.eventrail.prefix);
    } catch (error) {
      rethrowMissingTable(error, outboxTable);
    }
    return { ...status, relay: { enabled: relay.enabled, ...this.relay.stats() } };
  }
}
