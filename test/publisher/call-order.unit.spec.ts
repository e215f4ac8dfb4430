import { CallOrder, orderLane } from '../../lib/publisher/call-order';

describe('orderLane', () => {
  it('names the lane of a key, or of a keyless call its partition, whatever the partition value', () => {
    expect(orderLane({ key: 'customer-1' })).toBe('key:customer-1');
    expect(orderLane({})).toBe('partition:0');
    expect(orderLane({ partition: 3 })).toBe('partition:3');
    expect(orderLane({ partition: 3 })).toBe(orderLane({ partition: 3 }));
    expect(orderLane({ partition: -0 })).toBe('partition:0');
    expect(orderLane({ partition: 1023 })).toBe('partition:1023');
    // Values the publisher refuses once it checks them still get a lane of their own.
    expect(orderLane({ partition: 1024 })).toBe('partition:1024');
    expect(orderLane({ partition: 1.5 })).toBe('partition:1.5');
    expect(orderLane({ partition: -1 })).toBe('partition:-1');
    expect(orderLane({ partition: '2' })).toBe('partition:2');
    expect(orderLane({ key: 7 })).toBeUndefined();
    expect(orderLane(null)).toBeUndefined();
  });
});

describe('CallOrder.waitingOnLane', () => {
  it('says what waitingOn says of the one lane', async () => {
    const order = new CallOrder();
    expect(order.waitingOnLane('partition:0')).toBe(false);
    expect(order.waitingOnLane(undefined)).toBe(false);
    let answer: (name: string) => void = () => undefined;
    const held = order.hold(['key:a'], new Promise<string>((resolve) => (answer = resolve)), async (name) => name);
    for (const lane of ['key:a', 'key:b', 'partition:0', undefined]) {
      expect(order.waitingOnLane(lane)).toBe(lane === undefined ? false : order.waitingOn([lane]));
    }
    expect(order.waitingOnLane('key:a')).toBe(true);
    answer('done');
    await expect(held).resolves.toBe('done');
    expect(order.waitingOnLane('key:a')).toBe(false);
  });
});
