import type { EventrailRedis } from '../../redis/eventrail-redis';

/**
 * Keeps the members of a group that lack wanted types off its partitions.
 * Such a member stops working on its own once its heartbeat shows what it
 * lacks; until then (a tick, or longer when the rebalance signal is lost) it
 * would commit past events a newer member handles. So every member that sees
 * the gap bars the lacking ones from every partition (barMembers-2.lua): their
 * leases are revoked at once (revoke-lease.lua), fencing their next commit, and they cannot
 * take a partition again while the bar holds. Bars are renewed every tick
 * while the gap lasts, and lifted when this member sees it close.
 */
export class MemberBars {
  /** Members this worker barred at its last update. */
  private barred: readonly string[] = [];

  constructor(
    private readonly redis: EventrailRedis,
    private readonly group: string,
    private readonly self: string,
    /** How long a bar holds unless renewed: longer than a tick, so it never lapses while the gap lasts. */
    private readonly ttlMs: number,
  ) {}

  /**
   * Bars every other member listed in `gaps` (member -> the wanted types it
   * lacks) and lifts the bars of those no longer listed. While some member is
   * barred, a lease held by a worker outside `able` (the live members that
   * handle every wanted type) is taken back as well: a worker whose heartbeat
   * lapsed while it kept committing (a long hand-back) is no live member, so
   * nobody sees what it lacks. Answers the partitions whose lease was taken back.
   */
  async update(gaps: Record<string, readonly string[]>, able: readonly string[] = []): Promise<number[]> {
    const lacking = Object.keys(gaps)
      .filter((id) => id !== this.self)
      .sort();
    const lifted = this.barred.filter((id) => !lacking.includes(id));
    if (lacking.length === 0 && lifted.length === 0) return [];
    const { scripts, keys } = this.redis;
    const group = this.group;
    const partitions = Array.from({ length: keys.partitions }, (_, p) => p);
    const taken = await Promise.all(
      partitions.map(async (partition) => {
        if (lifted.length > 0) await scripts.barMembers({ group, partition, workerIds: lifted, ttlMs: 0 });
        return lacking.length > 0 && scripts.barMembers({ group, partition, workerIds: lacking, ttlMs: this.ttlMs, able });
      }),
    );
    this.barred = lacking;
    return partitions.filter((_, i) => taken[i]);
  }

  /**
   * Lifts this member's bars as it leaves, when it was the only live member
   * able to work: the ones it barred may be able once it is gone. While
   * another able member stays, the bars stay (they are the same fields, which
   * that member renews).
   */
  async leave(able: readonly string[]): Promise<void> {
    if (able.some((id) => id !== this.self)) return;
    await this.update({});
  }
}
