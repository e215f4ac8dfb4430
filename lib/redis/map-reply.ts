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
  } else if (reply instanceof Map) {
    for (const [name, value] of reply as Map<unknown, unknown>) fields.set(String(name), value);
  } else if (reply !== null && typeof reply === 'object') {
    for (const [name, value] of Object.entries(reply)) fields.set(name, value);
  }
  return fields;
}
