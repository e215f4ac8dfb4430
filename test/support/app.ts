import { INestApplicationContext, Provider } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import { EventrailModule, EventrailModuleOptions } from '../../lib';
import { testRedisUrl } from './helpers';

/** Boots a Nest application context with the module and the given handler providers, as a user app would. */
export async function createApp(options: EventrailModuleOptions, providers: Provider[] = []): Promise<INestApplicationContext> {
  const moduleRef = await Test.createTestingModule({
    imports: [EventrailModule.forRoot({ redis: testRedisUrl(), ...options })],
    providers,
  }).compile();
  return moduleRef.init();
}
