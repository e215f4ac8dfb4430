import { Controller, Get } from '@nestjs/common';
import { LedgerService, LedgerSnapshot } from './ledger.service';

@Controller('ledger')
export class LedgerController {
  constructor(private readonly ledger: LedgerService) {}

  @Get()
  totals(): LedgerSnapshot {
    return this.ledger.snapshot();
  }
}
