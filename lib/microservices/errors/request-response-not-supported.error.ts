import { EventrailError } from '../../errors/eventrail.error';

/**
 * `ClientProxy.send` (request/response, `@MessagePattern`) was used on the
 * eventrail transport. A log has no reply channel: an event is appended once,
 * handled by every group that listens to it, maybe much later, maybe more than
 * once, so there is no single answer to wait for.
 */
export class RequestResponseNotSupportedError extends EventrailError {
  constructor(
    readonly pattern: string,
    readonly where: 'send' | '@MessagePattern',
  ) {
    super(
      `${where === 'send' ? `client.send('${pattern}')` : `@MessagePattern('${pattern}')`} is request/response, which an event log cannot do: ` +
        'an event is handled by every group that listens to it, possibly later and more than once, so there is no one reply to wait for. ' +
        'Use client.emit() and @EventPattern(); for a reply, have the handler emit an event of its own.',
    );
  }
}
