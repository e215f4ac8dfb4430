import { defineEvent } from 'nestjs-eventrail';
import { z } from 'zod';

/** The one event of the sample, shared by the producer and the handlers. */
export const PAYMENT_COMPLETED = 'payment.completed';

export interface PaymentCompleted {
  paymentId: string;
  /** Integer minor units (cents), so totals add up exactly. */
  amountCents: number;
  currency: string;
  email: string;
}

/**
 * The same event, typed and checked: the controller publishes it and the
 * mailer handles it through this definition, so a payment that does not match
 * the schema is refused at `publish` (and dead-lettered as `invalid` in the
 * mailer group if some other producer appends one).
 */
export const PaymentCompletedEvent = defineEvent(
  PAYMENT_COMPLETED,
  z.object({
    paymentId: z.string().min(1),
    amountCents: z.number().int().positive(),
    currency: z.string().regex(/^[A-Z]{3}$/),
    email: z.string(),
  }),
);
