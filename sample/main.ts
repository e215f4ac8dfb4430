// The sample app: `npm run sample` (which finds or starts a Redis), then
//   curl -X POST localhost:3000/payments -H 'content-type: application/json' -d '{"amountCents":1250,"currency":"EUR"}'
//   curl localhost:3000/payments/demo
//   curl localhost:3000/ledger
import { Logger } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import type { AddressInfo } from 'node:net';
import { AppModule } from './app.module';
import { runSmoke } from './smoke';

async function bootstrap(): Promise<void> {
  const smoke = process.env.SAMPLE_SMOKE === '1';
  const app = await NestFactory.create(AppModule);
  // On SIGINT/SIGTERM the consumers stop cleanly: running handlers finish,
  // offsets are committed and partitions handed over at once.
  app.enableShutdownHooks();
  // The smoke run takes any free port unless PORT is set, so it never collides with a running sample.
  await app.listen(Number(process.env.PORT ?? (smoke ? 0 : 3000)));
  const { port } = app.getHttpServer().address() as AddressInfo;
  const baseUrl = `http://127.0.0.1:${port}`;

  if (!smoke) {
    new Logger('Sample').log(`Listening on ${baseUrl}: POST /payments, GET /payments/demo, GET /ledger`);
    return;
  }
  const ok = await runSmoke(app, baseUrl).catch((error: unknown) => {
    console.error('SAMPLE SMOKE FAILED:', error);
    return false;
  });
  // Do not hang CI if shutdown itself gets stuck.
  setTimeout(() => {
    console.error('SAMPLE SMOKE FAILED: shutdown did not finish within 15 s');
    process.exit(1);
  }, 15_000).unref();
  await app.close();
  process.exit(ok ? 0 : 1);
}

bootstrap().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
