import { Presets, SingleBar } from 'cli-progress';
import type { ProgressListener } from '../../admin/operations.types';

/**
 * A progress bar on stderr for long operations (replaying every dead letter,
 * a retention cycle, an archive restore). Off unless stderr is a terminal and
 * the output is not `--json`: in a pipe or a log file a bar is only noise.
 */
export class ProgressReporter {
  private bar?: SingleBar;

  constructor(
    private readonly label: string,
    private readonly enabled: boolean,
    private readonly unit: string,
  ) {}

  /** Shows the bar at 0 when the total is known before the first step completes. */
  start(total: number): void {
    if (!this.enabled || total <= 0) return;
    this.bar ??= this.create();
    this.bar.start(total, 0);
  }

  /** Pass as `onProgress` to the admin service. */
  readonly listener: ProgressListener = (done, total) => {
    if (!this.enabled) return;
    if (!this.bar) {
      this.bar = this.create();
      this.bar.start(total ?? done, done);
    }
    if (total !== null) this.bar.setTotal(total);
    this.bar.update(done);
  };

  stop(): void {
    this.bar?.stop();
    this.bar = undefined;
  }

  private create(): SingleBar {
    return new SingleBar(
      {
        format: `${this.label} [{bar}] {percentage}% | {value}/{total} ${this.unit} | {duration_formatted}`,
        stream: process.stderr,
        hideCursor: true,
        fps: 10,
      },
      Presets.shades_classic,
    );
  }
}
