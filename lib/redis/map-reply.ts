/**
 * A map reply (`XINFO STREAM`, `CONFIG GET`) as name → value, whichever shape
 * ioredis gives it: a flat `[name, value, ...]` array (RESP2, and RESP3 under
 * its default `legacy` reply mapping) or a plain object (`replyMapping:
 * 'resp3'`, which a user's connection options or own client may ask for).
 */
export function mapReply(reply: unknown): Map<string, unknown> {
  const fields = new Map<string, unknown>();
  if (Array.isArray(reply)) {
    for (let i = 0; i + 1 < reply.length; i += 2) fields.set(String(reply[i]), reply[i + 1]);
  } else if (reply !== null && typeof reply === 'object') {
    for (const [name, value] of Object.entries(reply)) fields.set(name, value);
  }
  return fields;
}

/**
 * A `ZRANGE ... WITHSCORES` reply as member → score, whichever shape ioredis
 * gives it: flat `[member, score, ...]` with scores as strings (RESP2, and
 * RESP3 under the `legacy` reply mapping) or `[[member, score], ...]` with
 * scores as numbers (`replyMapping: 'resp3'`).
 */
export function scoredReply(reply: unknown): Map<string, number> {
  const scores = new Map<string, number>();
  if (!Array.isArray(reply)) return scores;
  if (reply.length > 0 && Array.isArray(reply[0])) {
    for (const pair of reply as unknown[][]) scores.set(String(pair[0]), Number(pair[1]));
  } else {
    for (let i = 0; i + 1 < reply.length; i += 2) scores.set(String(reply[i]), Number(reply[i + 1]));
  }
  return scores;
}
