import type { Cluster, Redis } from 'ioredis';
import { FRAME_BYTES } from '../../lib/redis/big-entries';

/** Each entry of `stream` by id, weighed as a worker counts it: its id, names and values, and FRAME_BYTES for each. */
export async function entrySizes(redis: Redis | Cluster, stream: string): Promise<Map<string, number>> {
  const sizes = new Map<string, number>();
  for (const [id, fields] of await redis.xrangeBuffer(stream, '-', '+')) {
    sizes.set(
      id.toString(),
      fields.reduce((sum, field) => sum + field.length + FRAME_BYTES, id.length + FRAME_BYTES),
    );
  }
  return sizes;
}
