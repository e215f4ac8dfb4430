import { Module } from '@nestjs/common';
import { TerminusModule } from '@nestjs/terminus';
import { LoggerModule } from 'nestjs-pino';
import { Registry } from 'prom-client';
import { EventrailDashboardModule, EventrailModule } from 'nestjs-eventrail';
import { EventrailHealthModule } from 'nestjs-eventrail/health';
import { EventrailOutboxModule } from 'nestjs-eventrail/outbox';
import { createPrometheusMetrics } from 'nestjs-eventrail/prometheus';
import { AuditLogService } from './audit-log.service';
import { GroupGauges } from './group-gauges';
import { HealthController } from './health.controller';
import { LedgerController } from './ledger.controller';
import { LedgerService } from './ledger.service';
import { MailerService } from './mailer.service';
import { MetricsController } from './metrics.controller';
import { MetricsModule } from './metrics.module';
import { PaymentsController } from './payments.controller';
import { BillingService } from './billing.service';
import { OrdersController } from './orders.controller';
import { SampleDatabase } from './sample-database';
import { SampleDatabaseModule } from './sample-database.module';

@Module({
  imports: [
    // JSON lines on stdout, eventrail's logs included (it logs through Nest's Logger).
    // Probes of /health and /metrics and the dashboard's refreshes would drown the rest: no request line for them.
    LoggerModule.forRoot({
      pinoHttp: {
        autoLogging: { ignore: (req) => req.url === '/health' || req.url === '/metrics' || req.url?.startsWith('/eventrail') === true },
      },
    }),
    MetricsModule,
    // Redis comes from EVENTRAIL_REDIS_URL (`npm run sample` sets it). A prefix of
    // its own keeps the sample's keys apart from anything else in that Redis.
    EventrailModule.forRootAsync({
      inject: [Registry],
      useFactory: (registry: Registry) => ({
        prefix: process.env.EVENTRAIL_PREFIX ?? 'eventrail-sample',
        partitions: 4,
        metrics: createPrometheusMetrics({ registry }),
        // The outbox relay appends each row with its event id: dedup absorbs a batch it has to send again.
        dedupWindowMs: 600_000,
      }),
    }),
    // The orders flow: POST /orders stages order.placed in the order's transaction; the relay appends it after commit.
    SampleDatabaseModule,
    EventrailOutboxModule.forRootAsync({
      imports: [SampleDatabaseModule],
      inject: [SampleDatabase],
      useFactory: (database: SampleDatabase) => ({ connector: database.connector, ensureSchema: true }),
    }),
    TerminusModule,
    EventrailHealthModule,
    // The dashboard at /eventrail. Without EVENTRAIL_DASHBOARD_TOKEN a token is generated at startup and the
    // link that carries it is logged (one click); with NODE_ENV=production a configured token is required.
    EventrailDashboardModule.register({
      path: '/eventrail',
      auth: process.env.EVENTRAIL_DASHBOARD_TOKEN ? { token: process.env.EVENTRAIL_DASHBOARD_TOKEN } : undefined,
    }),
  ],
  controllers: [PaymentsController, OrdersController, LedgerController, HealthController, MetricsController],
  providers: [MailerService, LedgerService, BillingService, GroupGauges, AuditLogService],
})
export class AppModule {}
