import { EventrailError } from '../../errors/eventrail.error';

/** `EventrailDashboardModule` was registered with `auth: false` while `NODE_ENV` is `production`. Thrown at startup. */
export class DashboardAuthDisabledError extends EventrailError {
  constructor(readonly path: string) {
    super(
      `The eventrail dashboard at "${path}" has auth: false, which is refused when NODE_ENV=production: ` +
        'set auth: { token } so that only holders of the secret can read payloads and replay or purge dead letters',
    );
  }
}
