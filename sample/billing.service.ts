import { Injectable } from '@nestjs/common';
import { EventrailMessage, OnEvent } from 'nestjs-eventrail';
import { EventrailInbox } from 'nestjs-eventrail/outbox';
import { ORDER_PLACED, OrderPlaced } from './order-events';
import type { SqlTransaction } from './sample-database';

/**
 * Consumer group `billing`: writes one invoice per order through the inbox,
 * so the invoice and the record that this event was handled commit together,
 * and a redelivered `order.placed` bills nothing twice.
 */
@Injectable()
export class BillingService {
  constructor(private readonly inbox: EventrailInbox) {}

  @OnEvent(ORDER_PLACED, 'billing')
  async bill(message: EventrailMessage<OrderPlaced>): Promise<void> {
    const { orderId, customer, amountCents } = message.data;
    await this.inbox.handle<void, SqlTransaction>(message, async (tx) => {
      await tx.query('insert into invoices (order_id, customer, amount_cents) values ($1, $2, $3)', [orderId, customer, amountCents]);
    });
  }
}
