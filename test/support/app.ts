import { INestApplicationContext, ModuleMetadata, Provider } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import { EventrailModule, EventrailModuleOptions } from '../../lib';
import { testRedisUrl } from './helpers';

/**
 * Boots a Nest application context with the module (on the test Redis unless
 * `options.redis` says otherwise), the given handler providers and any other
 * modules, as a user app would.
 */
export async function createApp(
  options: EventrailModuleOptions,
  providers: Provider[] = [],
  imports: NonNullable<ModuleMetadata['imports']> = [],
): Promise<INestApplicationContext> {
  const moduleRef = await Test.createTestingModule({
    imports: [EventrailModule.forRoot({ redis: testRedisUrl(), ...options }), ...imports],
    providers,
  }).compile();
  return moduleRef.init();
}
