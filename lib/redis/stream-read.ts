/**
 * How long an idle `XREAD BLOCK` waits in Redis before it is sent again: a
 * half-open connection then fails within this time instead of hanging a
 * reader for ever.
 */
export const BLOCK_MS = 10_000;

/** What `XREAD` answers: per stream, its entries as `[id, fields]`; null when a block timed out. */
export type XReadReply = Array<[stream: string, entries: Array<[id: string, fields: string[]]>]> | null;

/** `XReadReply` as `xreadBuffer` answers it, every bulk string a Buffer. */
export type XReadBufferReply = Array<[stream: Buffer, entries: Array<[id: Buffer, fields: Buffer[]]>]> | null;
