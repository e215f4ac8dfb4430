import { Injectable, Logger } from '@nestjs/common';
import { EventrailMessage, OnEvent } from 'nestjs-eventrail';
import { PAYMENT_COMPLETED, PaymentCompleted } from './payment-events';

/** Consumer group `mailer`: sends a receipt for every completed payment. */
@Injectable()
export class MailerService {
  private readonly logger = new Logger(MailerService.name);
  private readonly sent = new Set<string>();

  @OnEvent(PAYMENT_COMPLETED, 'mailer')
  sendReceipt(message: EventrailMessage<PaymentCompleted>): void {
    const { paymentId, email } = message.data;
    this.logger.log(`sending receipt for ${paymentId} to ${email} (event ${message.id}, partition ${message.partition})`);
    this.sent.add(paymentId);
  }

  hasSent(paymentId: string): boolean {
    return this.sent.has(paymentId);
  }
}
