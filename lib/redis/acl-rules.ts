/**
 * The Redis ACL rules an eventrail user needs, from the key layout in
 * `log/keys.ts` and every command `lib/` sends (scripts included: Redis
 * checks the commands a Lua script calls against the caller's ACL too).
 * The README's "Permissions (ACL)" section prints them; the ACL suite runs
 * the library as users with exactly these rules.
 */

/** Commands of the full user: publisher, consumers, retention, dead letters, admin writes. */
const FULL_COMMANDS = [
  ...['xadd', 'xread', 'xrange', 'xrevrange', 'xlen', 'xtrim', 'xdel', 'xinfo|stream'],
  ...['get', 'set', 'del', 'exists', 'incr', 'pexpire', 'pttl'],
  ...['hget', 'hset', 'hsetnx', 'hgetall', 'hdel', 'hincrby', 'hvals'],
  ...['zadd', 'zrange', 'zrangebyscore', 'zremrangebyscore', 'zrem', 'zmscore'],
  ...['sadd', 'srem', 'smembers', 'sismember'],
  ...['evalsha', 'eval', 'multi', 'exec', 'discard', 'time', 'publish', 'subscribe', 'unsubscribe'],
  ...['ping', 'hello', 'auth', 'select', 'quit'],
];

/** Commands of the read-only user: the admin API's reads (dashboard, `eventrail status`, `groups`, `dlq list`, `tail`). */
const READ_COMMANDS = [
  ...['xread', 'xrange', 'xrevrange', 'xlen', 'xinfo|stream'],
  ...['get', 'exists', 'pttl', 'hget', 'hgetall', 'hvals', 'zrange', 'zrangebyscore', 'zmscore', 'smembers', 'sismember'],
  // The O(1) lag read is a script (readLag-3). Scripts do not widen a user: Redis checks each command a script calls against the caller's ACL.
  ...['evalsha', 'eval'],
  ...['time', 'ping', 'hello', 'auth', 'select', 'quit'],
];

/**
 * What either user may be given or denied; eventrail works without each, and
 * says once at startup what it could not check: `info` (persistence and
 * eviction policy checks, memory in `status`), `role` (replicas in
 * `admin.nodes()`), `config|get` (the same checks where `INFO` lacks them),
 * `wait` (`durability: 'replicated'`, needed there), and on Redis Cluster
 * `cluster|slots` and `cluster|keyslot` (`admin.nodes()`).
 */
const OPTIONAL_COMMANDS = ['info', 'role', 'config|get', 'wait', 'cluster|slots', 'cluster|keyslot'];

export interface EventrailAclRules {
  /** Publisher, consumers, retention, dead letters and admin writes. */
  full: string;
  /** Dashboard and CLI reads: status, groups, dead letters, the log, tail. No writes. */
  readOnly: string;
  /** Optional commands, to append to either rule (`+info +role ...`). */
  optional: string;
}

/**
 * The ACL rules for the log at `prefix`, to put after `ACL SETUSER <name> on >password`
 * (or in an ACL file). Keys: `<prefix>:*` (log metadata, groups) and `{<prefix>:*`
 * (the partitions' hash-tagged keys, on Cluster too); pub/sub: the rebalance channel.
 */
export function eventrailAclRules(prefix = 'eventrail'): EventrailAclRules {
  const keys = `resetkeys ~${prefix}:* ~{${prefix}:*`;
  const allow = (commands: string[]): string => commands.map((c) => `+${c}`).join(' ');
  return {
    full: `${keys} resetchannels &${prefix}:rebalance -@all ${allow(FULL_COMMANDS)}`,
    readOnly: `${keys} resetchannels -@all ${allow(READ_COMMANDS)}`,
    optional: allow(OPTIONAL_COMMANDS),
  };
}
