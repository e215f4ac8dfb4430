import { Logger } from '@nestjs/common';
import type { Cluster, Redis } from 'ioredis';
import type { EventrailRedis } from '../../redis/eventrail-redis';
import { describeError } from '../../util/describe-error';

/**
 * Pub/sub between the workers of all groups: a worker that joins, leaves or
 * hands partitions back publishes the group name, and the others rebalance at
 * once instead of at their next heartbeat. One subscriber connection per
 * process; nothing is sent while nothing changes.
 */
export class RebalanceSignal {
  private readonly logger = new Logger(RebalanceSignal.name);
  private subscriber?: Redis | Cluster;
  /**
   * Fails the subscription in flight on `close()`. A SUBSCRIBE sent while
   * Redis was down, on a connection then disconnected while it reconnected,
   * never settled: a stop during a start that waited out an outage left that
   * start hanging (test/module/startup.int.spec.ts).
   */
  private abandon?: (error: Error) => void;

  constructor(private readonly redis: EventrailRedis) {}

  async listen(onGroup: (group: string) => void): Promise<void> {
    if (this.subscriber) return;
    const channel = this.redis.keys.rebalanceChannel;
    const subscriber = this.redis.duplicate();
    this.subscriber = subscriber;
    subscriber.on('message', (received: string, group: string) => {
      if (received === channel) onGroup(group);
    });
    try {
      await new Promise<void>((resolve, reject) => {
        this.abandon = reject;
        subscriber.subscribe(channel).then(() => resolve(), reject);
      });
    } catch (error) {
      // Not subscribed: the next listen starts over on a new connection.
      subscriber.disconnect();
      if (this.subscriber === subscriber) this.subscriber = undefined;
      throw error;
    } finally {
      this.abandon = undefined;
    }
  }

  async announce(group: string): Promise<void> {
    try {
      await this.redis.client.publish(this.redis.keys.rebalanceChannel, group);
    } catch (error) {
      // The others rebalance at their next heartbeat anyway.
      this.logger.debug(`Could not announce a rebalance of "${group}": ${describeError(error)}`);
    }
  }

  close(): void {
    this.abandon?.(new Error('the rebalance subscription was closed while subscribing'));
    this.subscriber?.disconnect();
    this.subscriber = undefined;
  }
}
