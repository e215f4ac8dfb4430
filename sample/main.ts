// The sample app: `npm run sample` (which finds or starts a Redis), then
//   curl -X POST localhost:3000/payments -H 'content-type: application/json' -d '{"amountCents":1250,"currency":"EUR"}'
//   curl localhost:3000/payments/demo
//   curl localhost:3000/ledger
//   curl localhost:3000/health
//   curl localhost:3000/metrics
// EVENTRAIL_SAMPLE_TRACING=console prints the OpenTelemetry spans.
import { Logger as NestLogger } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { Logger } from 'nestjs-pino';
import type { AddressInfo } from 'node:net';
import { EventrailDashboardLink } from 'nestjs-eventrail';
import { AppModule } from './app.module';
import { runSmoke } from './smoke';
import { startSampleTracing } from './tracing';

async function bootstrap(): Promise<void> {
  startSampleTracing();
  const smoke = process.env.SAMPLE_SMOKE === '1';
  // Logs from startup are held until pino takes over, so every line is JSON.
  const app = await NestFactory.create(AppModule, { bufferLogs: true });
  app.useLogger(app.get(Logger));
  // On SIGINT/SIGTERM the consumers stop cleanly: running handlers finish,
  // offsets are committed and partitions handed over at once.
  app.enableShutdownHooks();
  // The smoke run takes any free port unless PORT is set, so it never collides with a running sample.
  await app.listen(Number(process.env.PORT ?? (smoke ? 0 : 3000)));
  const { port } = app.getHttpServer().address() as AddressInfo;
  const baseUrl = `http://127.0.0.1:${port}`;

  if (!smoke) {
    new NestLogger('Sample').log(
      `Listening on ${baseUrl}: POST /payments, GET /payments/demo, GET /ledger, GET /health, GET /metrics; ` +
        `the dashboard at ${app.get(EventrailDashboardLink).url ?? `${baseUrl}/eventrail`}`,
    );
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
