/**
 * Runs a task one at a time. A call while it runs does not start a second
 * run; it asks for one more run after the current one (any number of calls
 * meanwhile make one), and shares the promise of the run in progress.
 */
export class SerialTask {
  private running?: Promise<void>;
  private again = false;

  constructor(
    private readonly task: () => Promise<void>,
    /** Checked before a run asked for meanwhile: false drops it (the owner is stopping). */
    private readonly wanted: () => boolean,
  ) {}

  /** The run in progress, if any. */
  get current(): Promise<void> | undefined {
    return this.running;
  }

  run(): Promise<void> {
    if (this.running) {
      this.again = true;
      return this.running;
    }
    this.running = (async () => {
      try {
        do {
          this.again = false;
          await this.task();
        } while (this.again && this.wanted());
      } finally {
        this.running = undefined;
      }
    })();
    return this.running;
  }
}
