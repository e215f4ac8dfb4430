import { LagReadTimeoutError } from './lag-read-timeout.error';

interface Flight {
  bounded: Promise<unknown>;
  startedAt: number;
}

/**
 * Bounds lag reads in time and in number. A caller waits at most `timeoutMs`;
 * callers asking the same thing while a read is under way share it; and
 * while a read has gone past its bound without Redis answering, every new
 * read is refused at once: a frozen Redis holds one read per kind, not one
 * per scrape, and no scrape waits behind another.
 */
export class LagReadGate {
  private readonly flights = new Map<string, Flight>();

  constructor(private readonly timeoutMs: number) {}

  run<T>(key: string, read: () => Promise<T>): Promise<T> {
    const now = performance.now();
    for (const flight of this.flights.values()) {
      const waitingMs = now - flight.startedAt;
      if (waitingMs >= this.timeoutMs) return Promise.reject(new LagReadTimeoutError(this.timeoutMs, waitingMs));
    }
    const shared = this.flights.get(key);
    if (shared) return shared.bounded as Promise<T>;
    const reading = read();
    let timer: NodeJS.Timeout | undefined;
    const bounded = new Promise<T>((resolve, reject) => {
      timer = setTimeout(() => reject(new LagReadTimeoutError(this.timeoutMs)), this.timeoutMs);
      timer.unref(); // a bound never keeps a process alive on its own
      reading.then(resolve, reject);
    });
    bounded.catch(() => undefined); // every caller sees the failure; nobody listening is not an unhandled rejection
    const flight: Flight = { bounded, startedAt: now };
    this.flights.set(key, flight);
    // The flight ends when Redis answers, not at the bound: until then it still holds a command on the connection.
    void reading
      .catch(() => undefined)
      .finally(() => {
        clearTimeout(timer);
        if (this.flights.get(key) === flight) this.flights.delete(key);
      });
    return bounded;
  }
}
