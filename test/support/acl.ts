import type Redis from 'ioredis';

/** `ACL SETUSER <name> reset on ><password> <rule>`: a user with exactly `rule`, replacing any earlier one. */
export async function createAclUser(root: Redis, name: string, password: string, rule: string): Promise<void> {
  await root.call('ACL', 'SETUSER', name, 'reset', 'on', `>${password}`, ...rule.split(' '));
}

export interface AclLogEntry {
  count: number;
  reason: string;
  object: string;
  username: string;
}

/** The server's `ACL LOG` entries for `username` (denials, grouped by command with a count). */
export async function aclLog(root: Redis, username: string): Promise<AclLogEntry[]> {
  const entries = (await root.call('ACL', 'LOG')) as unknown[][];
  return entries
    .map((flat) => {
      const fields = new Map<string, unknown>();
      for (let i = 0; i < flat.length; i += 2) fields.set(String(flat[i]), flat[i + 1]);
      return {
        count: Number(fields.get('count')),
        reason: String(fields.get('reason')),
        object: String(fields.get('object')),
        username: String(fields.get('username')),
      };
    })
    .filter((entry) => entry.username === username);
}
