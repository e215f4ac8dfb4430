import { parseMemberInfo } from './member-info';

/** What the live members of a group want, as their heartbeats registered it. */
export interface GroupWants {
  /** Event types some live member has a handler for, sorted. */
  wanted: string[];
  /** Live members that handle every wanted type, sorted: only they may work the group's partitions. */
  able: string[];
  /** Wanted types this worker has no handler for, sorted; empty when it is able. */
  lacking: string[];
  /** Each live member that lacks wanted types, with those types (members of an older version are not judged). */
  gaps: Record<string, string[]>;
}

export const NO_WANTS: GroupWants = { wanted: [], able: [], lacking: [], gaps: {} };

/**
 * During a rolling deploy the members of a group run different code: one has
 * a handler the other lacks. A worker that lacks a wanted type would commit
 * its partitions past those events, so only members that handle the union
 * of the live members' types count as able. Details without an event list (a
 * member of an older version) add nothing and count as able: what they
 * handle is unknown. `self` is judged by `own`, what it handles here.
 * `held` are the types of members gone without leaving, still wanted for a
 * grace period (see `GroupMembership`): a crashed or frozen member that comes
 * back finds its events still there.
 */
export function groupWants(
  live: readonly string[],
  details: Record<string, string>,
  self: string,
  own: ReadonlySet<string>,
  held: Iterable<string> = [],
): GroupWants {
  const handles = new Map<string, ReadonlySet<string> | undefined>();
  const wanted = new Set<string>([...own, ...held]);
  for (const member of live) {
    const events = member === self ? own : eventsOf(details[member]);
    handles.set(member, events);
    events?.forEach((event) => wanted.add(event));
  }
  const all = [...wanted].sort();
  const able = live.filter((member) => {
    const events = handles.get(member);
    return events === undefined || all.every((event) => events.has(event));
  });
  const gaps: Record<string, string[]> = {};
  for (const [member, events] of handles) {
    const missing = events ? all.filter((event) => !events.has(event)) : [];
    if (missing.length > 0) gaps[member] = missing;
  }
  return { wanted: all, able: [...able].sort(), lacking: all.filter((event) => !own.has(event)), gaps };
}

function eventsOf(json: string | undefined): ReadonlySet<string> | undefined {
  const { events } = parseMemberInfo(json);
  return Array.isArray(events) && events.every((e) => typeof e === 'string') ? new Set(events) : undefined;
}
