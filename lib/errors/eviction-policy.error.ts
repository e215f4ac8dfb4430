import { EventrailError } from './eventrail.error';

/** A Redis primary and the `maxmemory-policy` it runs with. */
export interface NodeEvictionPolicy {
  /** `host:port` of the primary. */
  node: string;
  /** Its `maxmemory-policy`, or null when neither `CONFIG GET` nor `INFO memory` would tell. */
  policy: string | null;
}

/**
 * Redis runs with a `maxmemory-policy` other than `noeviction` and the module
 * was told to refuse that (`requireNoEviction: true`). Under any other policy
 * a full Redis deletes keys instead of refusing writes: entries of the log,
 * committed offsets (the group replays from its initial offset), leases and
 * dead letters can vanish.
 */
export class EvictionPolicyError extends EventrailError {
  constructor(readonly nodes: readonly NodeEvictionPolicy[]) {
    super(
      `${nodes.map((n) => `Redis ${n.node} runs with maxmemory-policy ${n.policy}`).join('; ')}: when memory runs out it evicts keys, ` +
        'and eventrail would lose events, committed offsets and leases. Fix: redis-cli CONFIG SET maxmemory-policy noeviction ' +
        '(and maxmemory-policy noeviction in redis.conf), or give eventrail a Redis of its own. ' +
        'Startup refuses this because requireNoEviction is true.',
    );
  }
}
