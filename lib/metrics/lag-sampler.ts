import { Logger } from '@nestjs/common';
import { describeError } from '../util/describe-error';
import type { GroupLag } from './group-lag';
import type { GroupLagReader } from './group-lag.reader';
import { LagReadGate } from './lag-read.gate';

/**
 * When the lag is read: on demand, with callers that arrive while a read is
 * under way sharing it (one Prometheus scrape asks once per gauge), or on a
 * schedule, with callers answered from the latest read. Either way a read is
 * bounded by `timeoutMs` (see `LagReadGate`).
 */
export class LagSampler {
  private readonly logger = new Logger(LagSampler.name);
  private readonly gate: LagReadGate;
  private latest?: GroupLag[];
  private timer?: NodeJS.Timeout;
  private failing = false;

  constructor(
    private readonly reader: GroupLagReader,
    private readonly groups: readonly string[] | undefined,
    private readonly refreshMs: number,
    timeoutMs: number,
  ) {
    this.gate = new LagReadGate(timeoutMs);
  }

  /** The lag now (or as of the last scheduled read, when there is a schedule). */
  sample(): Promise<GroupLag[]> {
    if (this.timer !== undefined && this.latest !== undefined) return Promise.resolve(this.latest);
    return this.read();
  }

  /** Starts the schedule, when there is one. */
  start(): void {
    if (this.refreshMs === 0 || this.timer !== undefined) return;
    this.timer = setInterval(() => void this.refresh(), this.refreshMs);
    this.timer.unref(); // a schedule never keeps a process alive on its own
    void this.refresh();
  }

  stop(): void {
    clearInterval(this.timer);
    this.timer = undefined;
    this.latest = undefined;
  }

  private read(): Promise<GroupLag[]> {
    return this.gate.run('groups', () => this.reader.read(this.groups));
  }

  /**
   * A scheduled read. On a failure, a read past `timeoutMs` included, the last
   * read is dropped, so scrapes read Redis themselves and fail where it fails:
   * a scaler must not keep acting on a number that has stopped moving. Logged
   * once per outage.
   */
  private async refresh(): Promise<void> {
    try {
      const lags = await this.read();
      if (this.timer === undefined) return; // stopped meanwhile
      this.latest = lags;
      if (this.failing) this.logger.log('Reading group lag works again');
      this.failing = false;
    } catch (error) {
      this.latest = undefined;
      if (!this.failing) this.logger.warn(`Reading group lag failed: ${describeError(error)}`);
      this.failing = true;
    }
  }
}
