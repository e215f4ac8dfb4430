import { BadRequestException, Body, Controller, Get, HttpCode, Post } from '@nestjs/common';
import { EventrailOutbox, OutboxRecord } from 'nestjs-eventrail/outbox';
import { ORDER_PLACED, OrderPlaced } from './order-events';
import { SampleDatabase } from './sample-database';

interface PlaceOrderBody {
  customer?: unknown;
  amountCents?: unknown;
}

@Controller()
export class OrdersController {
  constructor(
    private readonly database: SampleDatabase,
    private readonly outbox: EventrailOutbox,
  ) {}

  /**
   * Saves an order and stages `order.placed` in the same transaction:
   * `{ "customer": "ada", "amountCents": 1250 }`. The event reaches the log
   * only if the order commits, through the outbox relay.
   */
  @Post('orders')
  @HttpCode(201)
  async place(@Body() body: PlaceOrderBody): Promise<OrderPlaced & { event: OutboxRecord }> {
    const { customer, amountCents } = body ?? {};
    if (typeof customer !== 'string' || customer.length === 0) throw new BadRequestException('customer must be a non-empty string');
    if (typeof amountCents !== 'number' || !Number.isInteger(amountCents) || amountCents <= 0) {
      throw new BadRequestException('amountCents must be a positive integer');
    }
    return this.database.transaction(async (tx) => {
      const { rows } = await tx.query<{ id: number }>('insert into orders (customer, amount_cents) values ($1, $2) returning id', [
        customer,
        amountCents,
      ]);
      const order: OrderPlaced = { orderId: rows[0].id, customer, amountCents };
      // The customer is the key: one customer's orders reach billing in the order they committed.
      const event = await this.outbox.publish(tx, ORDER_PLACED, order, { key: customer });
      return { ...order, event };
    });
  }

  @Get('orders')
  orders(): Promise<unknown[]> {
    return this.database.query('select id, customer, amount_cents, created_at from orders order by id');
  }

  /** What the `billing` group wrote through the inbox: one invoice per order, however often its event arrived. */
  @Get('invoices')
  invoices(): Promise<unknown[]> {
    return this.database.query('select order_id, customer, amount_cents, billed_at from invoices order by order_id');
  }
}
