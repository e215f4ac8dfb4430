import { Module } from '@nestjs/common';
import { SampleDatabase } from './sample-database';

/** Opens the sample's database once (PostgreSQL at DATABASE_URL, else embedded PGlite) for the orders flow and the outbox. */
@Module({
  providers: [{ provide: SampleDatabase, useFactory: () => SampleDatabase.open() }],
  exports: [SampleDatabase],
})
export class SampleDatabaseModule {}
