/** The one event of the sample, shared by the producer and the handlers. */
export const PAYMENT_COMPLETED = 'payment.completed';

export interface PaymentCompleted {
  paymentId: string;
  /** Integer minor units (cents), so totals add up exactly. */
  amountCents: number;
  currency: string;
  email: string;
}
