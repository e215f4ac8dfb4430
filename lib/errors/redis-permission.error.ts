import { EventrailError } from './eventrail.error';

/**
 * Redis refused a command this operation needs: the connection's ACL user
 * lacks the permission (`NOPERM`), or the server does not offer the command
 * (renamed or disabled by a managed service). Nothing was changed by the
 * refused command; the connection stays usable. The README's "Permissions
 * (ACL)" section lists what each kind of user needs.
 */
export class RedisPermissionError extends EventrailError {
  constructor(
    /** What was attempted (`replay dead letters`, `reset offsets`, ...). */
    readonly operation: string,
    /** Redis's reply, such as `NOPERM User dashboard has no permissions to run the 'xadd' command`. */
    readonly reply: string,
  ) {
    super(
      `Redis refused to ${operation}: ${reply}. The Redis user needs the full eventrail rule for this (see "Permissions (ACL)" in the README)`,
    );
  }
}
