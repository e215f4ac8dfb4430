import { DynamicModule, Module, Provider } from '@nestjs/common';
import { EventrailInbox } from './eventrail-inbox';
import { EventrailOutbox } from './eventrail-outbox';
import { EventrailOutboxAdmin } from './eventrail-outbox-admin';
import { EVENTRAIL_OUTBOX_OPTIONS } from './outbox.constants';
import { resolveOutboxOptions, type EventrailOutboxModuleAsyncOptions, type EventrailOutboxModuleOptions } from './outbox.options';
import { EventrailOutboxRelay } from './outbox-relay';
import { OutboxSchemaSetup } from './outbox-schema.setup';

const PROVIDERS: Provider[] = [OutboxSchemaSetup, EventrailOutbox, EventrailInbox, EventrailOutboxRelay, EventrailOutboxAdmin];
const EXPORTS = [EVENTRAIL_OUTBOX_OPTIONS, EventrailOutbox, EventrailInbox, EventrailOutboxRelay, EventrailOutboxAdmin];

/**
 * The outbox and the inbox (`nestjs-eventrail/outbox`). Needs `EventrailModule`
 * (global by default) for the publisher's checks and the relay's appends.
 */
@Module({})
export class EventrailOutboxModule {
  static forRoot(options: EventrailOutboxModuleOptions): DynamicModule {
    return {
      module: EventrailOutboxModule,
      global: options?.isGlobal ?? true,
      providers: [{ provide: EVENTRAIL_OUTBOX_OPTIONS, useValue: resolveOutboxOptions(options) }, ...PROVIDERS],
      exports: EXPORTS,
    };
  }

  /** Options from a factory, for a connector built from an injected `DataSource`, `Pool`, ... */
  static forRootAsync(options: EventrailOutboxModuleAsyncOptions): DynamicModule {
    return {
      module: EventrailOutboxModule,
      global: options.isGlobal ?? true,
      imports: options.imports ?? [],
      providers: [
        {
          provide: EVENTRAIL_OUTBOX_OPTIONS,
          inject: options.inject ?? [],
          useFactory: async (...args: never[]) => resolveOutboxOptions(await options.useFactory(...args)),
        },
        ...PROVIDERS,
      ],
      exports: EXPORTS,
    };
  }
}
