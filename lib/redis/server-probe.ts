import type Redis from 'ioredis';
import { describeError } from '../util/describe-error';
import { mapReply } from './map-reply';

/** What a probe learnt: the reply, or why the server would not say. */
export type ProbeAnswer<T> = { ok: true; value: T } | { ok: false; refused: string };

/**
 * The server commands eventrail only needs to check settings or describe
 * the deployment (`CONFIG GET`, `INFO <section>`, `ROLE`, `WAIT`), which
 * managed services and least-privilege users refuse: renamed away
 * (`rename-command CONFIG ""`: unknown command) or denied by an ACL
 * (`NOPERM`). A refused command is remembered per connection and never sent
 * to it again, so a health check or dashboard refresh does not repeat it;
 * any other failure (a timeout, a dropped connection) is not remembered.
 */
export class ServerProbe {
  private readonly refused = new WeakMap<Redis, Map<string, string>>();

  configGet(node: Redis, parameter: string): Promise<ProbeAnswer<string | null>> {
    return this.ask(node, 'CONFIG', async () => {
      const value = mapReply(await node.config('GET', parameter)).get(parameter);
      return typeof value === 'string' ? value : null;
    });
  }

  /** One `INFO` field (`maxmemory_policy` of section `memory`), null when the section lacks it. */
  infoField(node: Redis, section: string, field: string): Promise<ProbeAnswer<string | null>> {
    return this.ask(node, 'INFO', async () => new RegExp(`^${field}:(\\S+)`, 'm').exec(await node.info(section))?.[1] ?? null);
  }

  /** `ROLE`: a primary's replicas as `host:port`, or the primary a replica follows. */
  role(node: Redis): Promise<ProbeAnswer<{ role: string; primary?: string; replicas: string[] }>> {
    return this.ask(node, 'ROLE', async () => {
      const reply = (await node.call('ROLE')) as unknown[];
      const role = String(reply[0]);
      if (role === 'master') {
        const replicas = ((reply[2] as unknown[][] | undefined) ?? []).map(([host, port]) => `${String(host)}:${String(port)}`);
        return { role, replicas };
      }
      return { role, primary: `${String(reply[1])}:${String(reply[2])}`, replicas: [] };
    });
  }

  /** `WAIT 0 1`: returns at once; tells whether `durability: 'replicated'` can work on this connection. */
  wait(node: Redis): Promise<ProbeAnswer<number>> {
    return this.ask(node, 'WAIT', async () => Number(await node.wait(0, 1)));
  }

  /** Whether `command` was refused by `node` (then the reason), without asking again. */
  refusal(node: Redis, command: string): string | undefined {
    return this.refused.get(node)?.get(command);
  }

  private async ask<T>(node: Redis, command: string, send: () => Promise<T>): Promise<ProbeAnswer<T>> {
    const known = this.refusal(node, command);
    if (known !== undefined) return { ok: false, refused: known };
    try {
      return { ok: true, value: await send() };
    } catch (error) {
      const reason = describeError(error);
      if (isRefusal(reason)) {
        const refused = this.refused.get(node) ?? new Map<string, string>();
        refused.set(command, reason);
        this.refused.set(node, refused);
      }
      return { ok: false, refused: reason };
    }
  }
}

/** An ACL denial or a command the server does not have (renamed, disabled by the provider). */
export function isRefusal(message: string): boolean {
  // A denial inside MULTI arrives as `EXECABORT Transaction discarded because of: NOPERM ...`; one inside a
  // Lua script, on Redis 7.0, as `ERR The user executing the script can't run this command or subcommand ...`,
  // on Redis 7.2+ and Valkey as `ERR ACL failure in script: ...`.
  return /^(?:EXECABORT .*: )?(?:NOPERM|ERR unknown (?:sub)?command|ERR The user executing the script can't run|ERR ACL failure in script)/i.test(
    message,
  );
}
