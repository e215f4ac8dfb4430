import { Injectable } from '@nestjs/common';
import { BatchResult, EventrailMessage, OnEvent } from 'nestjs-eventrail';
import { PAYMENT_COMPLETED, PaymentCompleted } from './payment-events';

export interface AuditRow {
  paymentId: string;
  amountCents: number;
  currency: string;
  publishedAt: string;
}

/**
 * Consumer group `audit`: a batch handler. Each call gets up to 100
 * consecutive payments of one partition (waiting up to 50 ms for company) and
 * writes them in one bulk insert, here into memory. A row the store refuses
 * is reported in `failed`: only that payment is retried, alone.
 */
@Injectable()
export class AuditLogService {
  private readonly rows = new Map<string, AuditRow>();
  private batches = 0;

  @OnEvent(PAYMENT_COMPLETED, { group: 'audit', batch: { maxSize: 100, maxWaitMs: 50 } })
  async append(messages: EventrailMessage<PaymentCompleted>[]): Promise<void | BatchResult<PaymentCompleted>> {
    const failed: BatchResult<PaymentCompleted>['failed'] = [];
    const rows: AuditRow[] = [];
    for (const message of messages) {
      const { paymentId, amountCents, currency } = message.data;
      if (!Number.isInteger(amountCents)) failed.push({ message, error: new Error(`amountCents ${amountCents} is not an integer`) });
      else rows.push({ paymentId, amountCents, currency, publishedAt: message.publishedAt.toISOString() });
    }
    await this.insertMany(rows);
    this.batches++;
    return failed.length > 0 ? { failed } : undefined;
  }

  hasRecorded(paymentId: string): boolean {
    return this.rows.has(paymentId);
  }

  stats(): { rows: number; batches: number } {
    return { rows: this.rows.size, batches: this.batches };
  }

  /** Stands in for one multi-row INSERT (keyed by payment, so a redelivered batch writes nothing twice). */
  private insertMany(rows: AuditRow[]): Promise<void> {
    for (const row of rows) this.rows.set(row.paymentId, row);
    return Promise.resolve();
  }
}
