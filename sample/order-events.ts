/** The orders flow's event: staged in the order's transaction through the outbox. */
export const ORDER_PLACED = 'order.placed';

export interface OrderPlaced {
  orderId: number;
  customer: string;
  amountCents: number;
}
