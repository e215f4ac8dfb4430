import { Module } from '@nestjs/common';
import { EventrailModule } from '../lib';
import { LedgerController } from './ledger.controller';
import { LedgerService } from './ledger.service';
import { MailerService } from './mailer.service';
import { PaymentsController } from './payments.controller';

@Module({
  imports: [
    // Redis comes from EVENTRAIL_REDIS_URL (`npm run sample` sets it). A prefix of
    // its own keeps the sample's keys apart from anything else in that Redis.
    EventrailModule.forRoot({ prefix: process.env.EVENTRAIL_PREFIX ?? 'eventrail-sample', partitions: 4 }),
  ],
  controllers: [PaymentsController, LedgerController],
  providers: [MailerService, LedgerService],
})
export class AppModule {}
