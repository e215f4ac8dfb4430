import { Logger } from '@nestjs/common';
import type { Cluster, Redis } from 'ioredis';
import type { EventrailRedis } from '../../redis/eventrail-redis';
import { describeError } from '../../util/describe-error';
import { explainRefusal } from './read-connection';

const ABANDONED = 'the rebalance subscription was closed while subscribing';

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
    let lastError: Error | undefined;
    const keep = (error: Error): void => void (lastError = error);
    subscriber.on('error', keep);
    try {
      await new Promise<void>((resolve, reject) => {
        this.abandon = reject;
        subscriber.subscribe(channel).then(() => resolve(), reject);
      });
    } catch (error) {
      // Not subscribed: the next listen starts over on a new connection.
      subscriber.disconnect();
      if (this.subscriber === subscriber) this.subscriber = undefined;
      throw await this.explained(error, lastError);
    } finally {
      this.abandon = undefined;
      subscriber.off('error', keep);
    }
  }

  /**
   * The subscription's failure, saying why its connection failed where the
   * failure itself does not. At `maxclients` Redis answers a new connection
   * `ERR max number of clients reached` and closes it: ioredis 6.0 failed the
   * SUBSCRIBE with that reply, 6.1 fails it with "Reached the max retries per
   * request limit" after a `write EPIPE`, so the count is asked as for a read
   * connection (`explainRefusal`: one INFO, on this failure only, and only
   * while the main connection is ready). A reply of Redis to the SUBSCRIBE
   * itself (an ACL refusing it) and a subscription closed by `close()` are
   * kept as they are.
   */
  private async explained(error: unknown, connectionError: Error | undefined): Promise<unknown> {
    if (!(error instanceof Error) || error.name === 'ReplyError' || error.message === ABANDONED) return error;
    const seen = connectionError?.message ?? error.message;
    // Only while the main connection answers: with Redis away, INFO would wait out its own retries.
    const why = this.redis.isReady() ? await explainRefusal(this.redis, seen) : seen;
    if (why === error.message) return error;
    return new Error(`${why} (the subscription failed: ${error.message})`, { cause: error });
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
    this.abandon?.(new Error(ABANDONED));
    this.subscriber?.disconnect();
    this.subscriber = undefined;
  }
}
