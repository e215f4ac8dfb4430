/** What a member records about itself for the admin API; with the TTL, its heartbeat expiry gives its last heartbeat. */
export interface MemberInfo {
  host?: string;
  pid?: number;
  startedAt?: number;
  heartbeatTtlMs?: number;
  /** The event types it handles in this group: the group wants the union over its live members (see `groupWants`). */
  events?: string[];
  /**
   * Types of members that went without leaving (their heartbeat expired), with
   * the ms on the Redis clock until which the group still wants them; shared
   * here so that every live member, a newly joined one too, keeps them wanted.
   */
  held?: Record<string, number>;
}

/** Member details as stored; unreadable details give an empty record (the member is reported without them). */
export function parseMemberInfo(json: string | undefined): MemberInfo {
  if (!json) return {};
  try {
    return JSON.parse(json) as MemberInfo;
  } catch {
    return {};
  }
}
