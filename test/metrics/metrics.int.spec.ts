import { Injectable, INestApplicationContext } from '@nestjs/common';
import Redis from 'ioredis';
import { Registry } from 'prom-client';
import { EventrailMessage, EventrailMetrics, EventrailPublisher, NonRetryableError, OnEvent } from '../../lib';
import { createPrometheusMetrics } from '../../lib/prometheus';
import { createApp } from '../support/app';
import { deletePrefix, testRedisUrl, uniquePrefix, waitFor } from '../support/helpers';

@Injectable()
class Shipping {
  @OnEvent('order.paid', { group: 'shipping', lockTtlMs: 1500 })
  ship(message: EventrailMessage<{ ok: boolean }>): void {
    if (!message.data.ok) throw new NonRetryableError('cannot ship');
  }
}

describe('metrics hooks', () => {
  let redis: Redis;
  let prefix: string;
  let app: INestApplicationContext | undefined;

  beforeAll(() => {
    redis = new Redis(testRedisUrl());
  });
  beforeEach(() => {
    prefix = uniquePrefix('met');
  });
  afterEach(async () => {
    await app?.close();
    app = undefined;
    await deletePrefix(redis, prefix);
  });
  afterAll(() => redis.disconnect());

  it('calls every hook with group, event, partition and offsets, and survives a hook that throws', async () => {
    const calls: Array<[string, ...unknown[]]> = [];
    const record =
      (name: string) =>
      (...args: unknown[]): void => {
        calls.push([name, ...args]);
      };
    const metrics: EventrailMetrics = {
      onMessageProcessed: (...args) => {
        record('processed')(...args);
        throw new Error('a broken exporter'); // logged once, consuming goes on
      },
      onHandlerError: record('error'),
      onMessageDeadLettered: record('deadLettered'),
      onMessageSkipped: record('skipped'),
      onLag: record('lag'),
      onLeaseAcquired: record('acquired'),
      onLeaseLost: record('lost'),
      onLeaseReleased: record('released'),
    };
    app = await createApp({ prefix, metrics }, [Shipping]);
    const publisher = app.get(EventrailPublisher);
    const good = await publisher.publish('order.paid', { ok: true });
    const bad = await publisher.publish('order.paid', { ok: false });
    const other = await publisher.publish('order.refunded', {});
    const again = await publisher.publish('order.paid', { ok: true });
    await waitFor(() => calls.filter((c) => c[0] === 'processed').length === 2, 'both good ones processed despite the throwing hook');
    // A heartbeat during the work may sample a lag above 0; once all is committed one samples 0.
    await waitFor(() => calls.some((c) => c[0] === 'lag' && c[3] === 0), 'lag 0 sampled at a heartbeat');

    const of = (name: string): unknown[][] => calls.filter((c) => c[0] === name).map((c) => c.slice(1));
    expect(of('acquired')[0]).toEqual(['shipping', 0]);
    // A lease lost and taken again would show as a pair; on a loaded machine a late renewal can do that.
    expect(of('lost')).toHaveLength(of('acquired').length - 1);
    expect(of('processed').map((c) => c.slice(0, 2))).toEqual([
      ['shipping', 'order.paid'],
      ['shipping', 'order.paid'],
    ]);
    expect(typeof of('processed')[0][2]).toBe('number');
    expect(of('error')).toEqual([['shipping', 'order.paid', expect.any(NonRetryableError), 1]]);
    expect(of('deadLettered')).toEqual([['shipping', 'order.paid', bad.offset, expect.stringMatching(/^\d+-\d+$/)]]);
    expect(of('skipped')).toEqual([['shipping', 'no-handler', other.offset]]);
    expect(of('lag')).toContainEqual(['shipping', 0, 0]);
    expect([good.offset, again.offset]).toHaveLength(2);
  });

  it('feeds prom-client through createPrometheusMetrics', async () => {
    const registry = new Registry();
    app = await createApp({ prefix, metrics: createPrometheusMetrics({ registry }) }, [Shipping]);
    const publisher = app.get(EventrailPublisher);
    await publisher.publish('order.paid', { ok: true });
    await publisher.publish('order.paid', { ok: false });
    await waitFor(
      async () => (await registry.metrics()).includes('eventrail_messages_dead_lettered_total{group="shipping",event="order.paid"} 1'),
      'dead letter counted',
    );
    const text = await registry.metrics();
    expect(text).toContain('eventrail_messages_processed_total{group="shipping",event="order.paid"} 1');
    expect(text).toContain('eventrail_handler_errors_total{group="shipping",event="order.paid"} 1');
    expect(text).toContain('eventrail_handler_duration_seconds_count{group="shipping",event="order.paid"} 1');
    expect(text).toContain('eventrail_lease_changes_total{group="shipping",change="acquired"} 1');
    // A second adapter on the same registry (a second app in one process) reuses the metrics.
    expect(() => createPrometheusMetrics({ registry }).onMessageProcessed?.('shipping', 'order.paid', 1)).not.toThrow();
    expect(await registry.metrics()).toContain('eventrail_messages_processed_total{group="shipping",event="order.paid"} 2');

    // Handed back at shutdown: the lag series of the partition goes, so no stale sample stays exported.
    await waitFor(async () => (await registry.metrics()).includes('eventrail_lag{group="shipping",partition="0"} 0'), 'lag sampled');
    await app.close();
    app = undefined;
    const after = await registry.metrics();
    expect(after).not.toContain('eventrail_lag{group="shipping"');
    expect(after).toContain('eventrail_lease_changes_total{group="shipping",change="released"} 1');
  });
});
