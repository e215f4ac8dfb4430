import { BadRequestException, Body, Controller, Get, HttpCode, Post } from '@nestjs/common';
import { randomUUID } from 'node:crypto';
import { EventrailPublisher, PublishResult } from 'nestjs-eventrail';
import { PaymentCompleted, PaymentCompletedEvent } from './payment-events';

interface CompletePaymentBody {
  id?: unknown;
  amountCents?: unknown;
  currency?: unknown;
  email?: unknown;
}

@Controller('payments')
export class PaymentsController {
  constructor(private readonly publisher: EventrailPublisher) {}

  /** Records a completed payment: `{ "amountCents": 1250, "currency": "EUR", "email": "a@example.com", "id"?: "..." }`. */
  @Post()
  @HttpCode(202)
  async complete(@Body() body: CompletePaymentBody): Promise<PublishResult & { paymentId: string }> {
    const payment = toPayment(body ?? {});
    // The payment id is the key: every event of one payment lands in one partition, in order.
    // Typed by the schema, and checked by it before anything is sent.
    const result = await this.publisher.publish(PaymentCompletedEvent, payment, { key: payment.paymentId });
    return { paymentId: payment.paymentId, ...result };
  }

  /** Publishes a few payments in one round trip, for a quick look at the logs and at GET /ledger. */
  @Get('demo')
  async demo(): Promise<PublishResult[]> {
    const payments: PaymentCompleted[] = [
      { paymentId: randomUUID(), amountCents: 1250, currency: 'EUR', email: 'ada@example.com' },
      { paymentId: randomUUID(), amountCents: 990, currency: 'EUR', email: 'alan@example.com' },
      { paymentId: randomUUID(), amountCents: 4200, currency: 'USD', email: 'grace@example.com' },
    ];
    return this.publisher.publishMany(payments.map((data) => ({ event: PaymentCompletedEvent, data, key: data.paymentId })));
  }
}

function toPayment(body: CompletePaymentBody): PaymentCompleted {
  const { id = randomUUID(), amountCents, currency = 'EUR', email = 'customer@example.com' } = body;
  if (typeof id !== 'string' || id.length === 0) throw new BadRequestException('id must be a non-empty string');
  if (typeof amountCents !== 'number' || !Number.isInteger(amountCents) || amountCents <= 0) {
    throw new BadRequestException('amountCents must be a positive integer');
  }
  if (typeof currency !== 'string' || !/^[A-Z]{3}$/.test(currency)) throw new BadRequestException('currency must be a code like "EUR"');
  if (typeof email !== 'string') throw new BadRequestException('email must be a string');
  return { paymentId: id, amountCents, currency, email };
}
