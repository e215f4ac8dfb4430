// The sample's own end-to-end test, written as the README's testing recipe says: a TestingModule with the
// app's providers and a per-test prefix, `settled()` instead of sleeps, and the prefix deleted afterwards.
import type { INestApplication } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import Redis from 'ioredis';
import type { AddressInfo } from 'node:net';
import { EventrailAdmin, EventrailConsumers, EventrailModule, EventrailPublisher, EventValidationError } from 'nestjs-eventrail';
import { createTestPrefix, type TestPrefix } from 'nestjs-eventrail/testing';
import { LedgerController } from '../../sample/ledger.controller';
import { LedgerService } from '../../sample/ledger.service';
import { MailerService } from '../../sample/mailer.service';
import { PAYMENT_COMPLETED, PaymentCompletedEvent } from '../../sample/payment-events';
import { PaymentsController } from '../../sample/payments.controller';
import { testRedisUrl } from '../support/helpers';

describe('the sample app', () => {
  // Jest's global setup started a throwaway redis-server (`startRedisServer()` from nestjs-eventrail/testing).
  const redisUrl = testRedisUrl();
  let prefix: TestPrefix;
  let app: INestApplication;
  let baseUrl: string;

  beforeEach(async () => {
    prefix = createTestPrefix(redisUrl, 'sample');
    const moduleRef = await Test.createTestingModule({
      imports: [EventrailModule.forRoot({ redis: redisUrl, prefix: prefix.prefix, partitions: 4 })],
      controllers: [PaymentsController, LedgerController],
      providers: [MailerService, LedgerService],
    }).compile();
    app = moduleRef.createNestApplication({ logger: false });
    await app.listen(0, '127.0.0.1');
    baseUrl = `http://127.0.0.1:${(app.getHttpServer().address() as AddressInfo).port}`;
  });

  afterEach(async () => {
    await app?.close();
    await prefix.delete();
  });

  const post = (body: object): Promise<Response> =>
    fetch(`${baseUrl}/payments`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });

  it('sends a receipt and books every payment posted over HTTP', async () => {
    for (const [id, amountCents, currency] of [
      ['p1', 1250, 'EUR'],
      ['p2', 990, 'EUR'],
      ['p3', 4200, 'USD'],
    ] as const) {
      expect((await post({ id, amountCents, currency, email: `${id}@example.com` })).status).toBe(202);
    }
    expect((await post({ amountCents: -5 })).status).toBe(400);

    await app.get(EventrailConsumers).settled();

    const mailer = app.get(MailerService);
    expect(['p1', 'p2', 'p3'].every((id) => mailer.hasSent(id))).toBe(true);
    expect(await (await fetch(`${baseUrl}/ledger`)).json()).toEqual({ payments: 3, totals: { EUR: 22.4, USD: 42 } });
  });

  it('publishes the demo payments in one call', async () => {
    expect((await fetch(`${baseUrl}/payments/demo`)).status).toBe(200);
    await app.get(EventrailConsumers).settled();
    expect(app.get(LedgerService).snapshot()).toEqual({ payments: 3, totals: { EUR: 22.4, USD: 42 } });
  });

  it("refuses a payment that fails the event's schema, and dead-letters one another producer appended", async () => {
    const publisher = app.get(EventrailPublisher);
    const refused = publisher.publish(PaymentCompletedEvent, { paymentId: 'p4', amountCents: 1.5, currency: 'EUR', email: 'x' });
    await expect(refused).rejects.toBeInstanceOf(EventValidationError);
    await expect(refused).rejects.toThrow('amountCents: Invalid input: expected int, received number');

    // A producer in another language, with one XADD and without the email the mailer's schema requires.
    const redis = new Redis(redisUrl);
    try {
      const data = JSON.stringify({ paymentId: 'p5', amountCents: 700, currency: 'EUR' });
      await redis.xadd(`{${prefix.prefix}:0}:log`, '*', 'event', PAYMENT_COMPLETED, 'data', data);
    } finally {
      redis.disconnect();
    }
    await app.get(EventrailConsumers).settled();

    expect(app.get(MailerService).hasSent('p5')).toBe(false);
    const [letter] = await app.get(EventrailAdmin).deadLetters('mailer');
    expect(letter).toMatchObject({ reason: 'invalid', event: PAYMENT_COMPLETED, issues: [{ path: 'email' }] });
    // The ledger group declares the event by name, without the schema: it books the payment.
    expect(app.get(LedgerService).hasRecorded('p5')).toBe(true);
  });
});
