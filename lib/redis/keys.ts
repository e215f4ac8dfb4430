import { logTag } from '../wire/event-id';

/**
 * Keys a group keeps in each partition's hash tag that deleting it removes, in the order of
 * dropGroupPartition-4.lua's KEYS; `groupPartitionKeys` lists them, so a delete cannot leave one
 * behind. The lease epoch counter is not one: it outlives a delete, so no lease token is issued twice.
 */
const PARTITION_GROUP_KEYS = ['offset', 'lease', 'recovery', 'done'] as const;
/**
 * Keys a group keeps for itself in its own hash tag `{G}`, in the order of dropGroup-6.lua's
 * KEYS; `groupOwnKeys` lists them. The group's generation counter is not one: it outlives a delete.
 */
const GROUP_KEYS = ['members', 'info', 'events', 'seen', 'dlq'] as const;

type PartitionGroupKey = (typeof PARTITION_GROUP_KEYS)[number] | 'epoch';
type GroupKey = (typeof GROUP_KEYS)[number];

/**
 * The only place that knows Redis key names. Keys of one partition share the
 * hash tag `{<prefix>:<partition>}`, so every script touches a single cluster
 * slot; keys that describe a whole group or the log live beside them under
 * `<prefix>:`. The README's key table mirrors this file.
 */
export class EventrailKeys {
  /** Stream key of each partition, computed once: the publisher looks them up per event. */
  readonly streams: readonly string[];
  /** Log metadata hash (`partitions`, `createdAt`). */
  readonly meta: string;
  /** Set of every group that ever registered. */
  readonly groups: string;
  /** Pub/sub channel that tells workers to rebalance; the message is the group name. */
  readonly rebalanceChannel: string;
  /** Not a key: the part of derived event ids that is this log's (see `derivedEventId`), computed once. */
  readonly logTag: string;

  constructor(
    readonly prefix: string,
    readonly partitions: number,
  ) {
    this.streams = Array.from({ length: partitions }, (_, p) => `${this.tag(p)}:log`);
    this.meta = `${prefix}:meta`;
    this.groups = `${prefix}:groups`;
    this.rebalanceChannel = `${prefix}:rebalance`;
    this.logTag = logTag(prefix);
  }

  stream(partition: number): string {
    return this.streams[partition];
  }

  /** Committed offset of a group in a partition: the stream id up to which everything is done. */
  offset(group: string, partition: number): string {
    return this.partitionGroupKey('offset', group, partition);
  }

  /** Lease of a group's partition; the value is `<workerId>:<epoch>`. */
  lease(group: string, partition: number): string {
    return this.partitionGroupKey('lease', group, partition);
  }

  /** Counter that gives every lease a fresh epoch. */
  epoch(group: string, partition: number): string {
    return this.partitionGroupKey('epoch', group, partition);
  }

  /**
   * Recovery state of a (group, partition): the epoch last released cleanly,
   * and how often the entry after the committed offset was delivered by a
   * worker that then died (the crash-loop count), and the group generation
   * that took the partition (see `generation`).
   */
  recovery(group: string, partition: number): string {
    return this.partitionGroupKey('recovery', group, partition);
  }

  /** Idempotency done-marks of a group in a partition: event id scored by expiry (ms). */
  done(group: string, partition: number): string {
    return this.partitionGroupKey('done', group, partition);
  }

  /** Producer dedup mark of an event id in a partition; holds the offset of the first append. */
  dedup(partition: number, eventId: string): string {
    return `${this.tag(partition)}:dedup:${eventId}`;
  }

  /**
   * Run guard of one `publishMany` call in a partition: how many of the call's runs there were
   * done; lives while the call's runs are sent, or its TTL (appendManyDedup-n.lua).
   */
  runGuard(partition: number, call: string): string {
    return `${this.tag(partition)}:run:${call}`;
  }

  /**
   * Index of a partition's big entries (more than `BIG_ENTRY_BYTES`, see `big-entries.ts`): a sorted
   * set of their stream ids scored by the id's milliseconds, written by the script that appends each.
   * A worker that is behind reads plain `XRANGE` up to the next one (readIndex-3.lua).
   */
  bigEntries(partition: number): string {
    return `${this.tag(partition)}:big`;
  }

  /**
   * The stream id after which every big entry of the partition is in `bigEntries`: the last entry when a
   * worker first asked (entries before it may be big and not indexed), or `none` once a writer appended
   * a big entry it could not index (a publisher where scripting is refused).
   */
  indexedFrom(partition: number): string {
    return `${this.tag(partition)}:indexed`;
  }

  /** Live members of a group: sorted set of worker ids scored by heartbeat expiry (ms). */
  members(group: string): string {
    return this.groupKey('members', group);
  }

  /** Member details (host, pid, start time) by worker id, for the admin API. */
  memberInfo(group: string): string {
    return this.groupKey('info', group);
  }

  /** Event types a group has handlers for. */
  events(group: string): string {
    return this.groupKey('events', group);
  }

  /** Unix ms of the latest heartbeat of any member: how long a group without members has been gone. */
  seen(group: string): string {
    return this.groupKey('seen', group);
  }

  /**
   * How often the group was deleted (pruned): a counter in the group's hash tag that outlives
   * the delete, as a tombstone. Heartbeats return it and acquires stamp it in each partition, so
   * the partition half of a delete spares what a worker that joined after it already took.
   */
  generation(group: string): string {
    return this.groupKey('generation', group);
  }

  /** Dead-letter stream of a group. */
  deadLetters(group: string): string {
    return this.groupKey('dlq', group);
  }

  /**
   * A replay's claim on one dead letter (`SET NX PX`), beside the group's dead-letter stream, so
   * concurrent replays append each dead letter once. Not in `groupKeys`: claims expire on their own.
   */
  replayClaim(group: string, deadLetterId: string): string {
    return `${this.groupPrefix(group)}:replay:${deadLetterId}`;
  }

  /** Lock that lets one instance of the fleet run a retention cycle at a time; holds the owner's token. */
  retentionLock(): string {
    return `${this.prefix}:retention:lock`;
  }

  /** Archive marks of a partition: archive sink id -> id of the last entry archived to that sink. */
  archived(partition: number): string {
    return `${this.tag(partition)}:archived`;
  }

  /** The keys `group` keeps in its own hash tag, which deleting it removes in one step (dropGroup-6.lua). */
  groupOwnKeys(group: string): string[] {
    return GROUP_KEYS.map((kind) => this.groupKey(kind, group));
  }

  /** The keys `group` keeps in `partition`, which deleting it removes (dropGroupPartition-4.lua); the log itself stays. */
  groupPartitionKeys(group: string, partition: number): string[] {
    return PARTITION_GROUP_KEYS.map((kind) => this.partitionGroupKey(kind, group, partition));
  }

  private groupKey(kind: GroupKey | 'generation', group: string): string {
    return `${this.groupPrefix(group)}:${kind}`;
  }

  /** Keys of a group share the hash tag `{<group>}`, so a script over them touches one cluster slot. */
  private groupPrefix(group: string): string {
    return `${this.prefix}:group:{${group}}`;
  }

  private partitionGroupKey(kind: PartitionGroupKey, group: string, partition: number): string {
    return `${this.tag(partition)}:${kind}:${group}`;
  }

  private tag(partition: number): string {
    return `{${this.prefix}:${partition}}`;
  }
}
