import { Injectable } from '@nestjs/common';
import { EventrailMessage, OnEvent } from 'nestjs-eventrail';
import { PAYMENT_COMPLETED, PaymentCompleted } from './payment-events';

export interface LedgerSnapshot {
  payments: number;
  /** Total per currency, in major units. */
  totals: Record<string, number>;
}

/** Consumer group `ledger`: running totals per currency, in memory. */
@Injectable()
export class LedgerService {
  private readonly centsByCurrency = new Map<string, number>();
  // Delivery is at-least-once (a crash replays from the last commit), so a
  // payment must be counted once however often its event arrives.
  private readonly counted = new Set<string>();

  @OnEvent(PAYMENT_COMPLETED, 'ledger')
  record(message: EventrailMessage<PaymentCompleted>): void {
    const { paymentId, amountCents, currency } = message.data;
    if (this.counted.has(paymentId)) return;
    this.counted.add(paymentId);
    this.centsByCurrency.set(currency, (this.centsByCurrency.get(currency) ?? 0) + amountCents);
  }

  hasRecorded(paymentId: string): boolean {
    return this.counted.has(paymentId);
  }

  snapshot(): LedgerSnapshot {
    const totals: Record<string, number> = {};
    for (const [currency, cents] of this.centsByCurrency) totals[currency] = cents / 100;
    return { payments: this.counted.size, totals };
  }
}
