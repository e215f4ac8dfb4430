import { EventrailError } from '../../errors/eventrail.error';

/** `EventrailCloudEventsModule` was registered without `auth.token` while `NODE_ENV` is `production`. Thrown at startup. */
export class IngressAuthRequiredError extends EventrailError {
  constructor(readonly path: string) {
    super(
      `The eventrail CloudEvents ingress at "${path}" needs auth: { token } when NODE_ENV=production: ` +
        'without it anyone who reaches the app could append events to the log',
    );
  }
}
