/**
 * Picks the partition of a keyed event: FNV-1a (32 bit) over the key's UTF-8
 * bytes, modulo the partition count. Documented in the README so producers in
 * other languages can choose the same partition.
 */
export function partitionForKey(key: string, partitions: number): number {
  if (partitions === 1) return 0;
  return fnv1a32(key) % partitions;
}

const FNV_OFFSET = 0x811c9dc5;
const FNV_PRIME = 0x01000193;

export function fnv1a32(key: string): number {
  let hash = FNV_OFFSET;
  for (let i = 0; i < key.length; i++) {
    const code = key.charCodeAt(i);
    if (code >= 0x80) return fnv1a32Bytes(Buffer.from(key, 'utf8'));
    hash = Math.imul(hash ^ code, FNV_PRIME);
  }
  return hash >>> 0;
}

function fnv1a32Bytes(bytes: Uint8Array): number {
  let hash = FNV_OFFSET;
  for (let i = 0; i < bytes.length; i++) hash = Math.imul(hash ^ bytes[i], FNV_PRIME);
  return hash >>> 0;
}
