import { Injectable, Logger } from '@nestjs/common';
import { EventData, EventrailMessage, OnEvent } from 'nestjs-eventrail';
import { PaymentCompletedEvent } from './payment-events';

/** Consumer group `mailer`: sends a receipt for every completed payment. */
@Injectable()
export class MailerService {
  private readonly logger = new Logger(MailerService.name);
  private readonly sent = new Set<string>();

  // The definition: the mailer group checks each payment against its schema before this runs.
  @OnEvent(PaymentCompletedEvent, 'mailer')
  sendReceipt(message: EventrailMessage<EventData<typeof PaymentCompletedEvent>>): void {
    const { paymentId, email } = message.data;
    this.logger.log(`sending receipt for ${paymentId} to ${email} (event ${message.id}, partition ${message.partition})`);
    this.sent.add(paymentId);
  }

  hasSent(paymentId: string): boolean {
    return this.sent.has(paymentId);
  }
}
