import { InvalidHandlerError } from '../../errors/invalid-handler.error';

interface Claim {
  owner: object;
  label: string;
  /** The event types it handles, sorted and joined: consumers with the same ones are competing workers and may share. */
  events: string;
}

/** The consumers of this process that run a group, by log prefix and group name. */
const claims = new Map<string, Claim[]>();

/**
 * Claims `group` on the log at `prefix` for `owner` in this process. An
 * `@OnEvent` group and an `EventrailServer({ group })` of the same name (or
 * two such servers) in one process are one group run twice by mistake: each
 * joins with its own handlers, each lacks the other's, and the group works
 * nothing (or, before the other joined, commits past its events). So a
 * second consumer with other event types is refused at startup, naming both.
 * Consumers with the same event types (separate apps in one process, as tests
 * run competing workers) may share. Idempotent for the same owner (a start
 * retried while Redis comes back).
 */
export function claimGroup(prefix: string, group: string, owner: object, label: string, handles: Iterable<string>): void {
  const key = `${prefix}\u0000${group}`;
  const events = [...new Set(handles)].sort().join('\n');
  const held = (claims.get(key) ?? []).filter((claim) => claim.owner !== owner);
  const other = held.find((claim) => claim.events !== events);
  if (other) {
    const [className, member] = splitLabel(label);
    throw new InvalidHandlerError(
      className,
      member,
      `group "${group}" on the log "${prefix}" is already consumed in this process by ${other.label}; ` +
        `${label} would run a second consumer of it, with other handlers, and the group would work nothing. ` +
        'Give one of them another group name (or put all the handlers in one group)',
    );
  }
  claims.set(key, [...held, { owner, label, events }]);
}

/** Gives `group` back, if `owner` holds it. */
export function releaseGroup(prefix: string, group: string, owner: object): void {
  const key = `${prefix}\u0000${group}`;
  const held = (claims.get(key) ?? []).filter((claim) => claim.owner !== owner);
  if (held.length > 0) claims.set(key, held);
  else claims.delete(key);
}

/** `Class.method` splits at its dot; another label (an `@EventPattern`) is the transport's. */
function splitLabel(label: string): [string, string] {
  const match = /^([A-Za-z_$][\w$]*)\.(.+)$/.exec(label.split(', ')[0]);
  return match ? [match[1], match[2]] : ['EventrailServer', label];
}
