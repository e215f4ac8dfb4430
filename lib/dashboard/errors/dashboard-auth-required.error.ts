import { EventrailError } from '../../errors/eventrail.error';

/** `EventrailDashboardModule` was registered without `auth.token` while `NODE_ENV` is `production`. Thrown at startup. */
export class DashboardAuthRequiredError extends EventrailError {
  constructor(readonly path: string) {
    super(
      `The eventrail dashboard at "${path}" needs auth: { token } when NODE_ENV=production: ` +
        'without it anyone who reaches the app could read payloads and replay or purge dead letters',
    );
  }
}
