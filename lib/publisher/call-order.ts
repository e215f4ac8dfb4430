interface Place {
  /** The call's check has settled: it may leave once every earlier place has. */
  ready: boolean;
  leave: () => void;
}

/**
 * Keeps publish calls in call order while some of them wait for an
 * asynchronous schema check. A call that must wait takes its place at once
 * (in the synchronous part of `publish`), and leaves only after every earlier
 * waiting call has left, in the order they were made: a later call with a
 * synchronous schema cannot overtake one whose schema answers later. A check
 * that fails gives its place up at once (the call rejects, nothing is sent),
 * so it never holds the calls behind it. While nothing waits, calls go
 * straight on and pay nothing for this.
 */
export class CallOrder {
  private readonly places: Place[] = [];

  /** True while an earlier call waits for its check: a call made now must `hold` its place behind it. */
  get waiting(): boolean {
    return this.places.length > 0;
  }

  /**
   * Takes the next place now; once `check` settles and every earlier place
   * has left, calls `send` with its value (or rejects with the check's
   * error). Settles like `send`'s promise.
   */
  hold<C, R>(check: C | PromiseLike<C>, send: (checked: C) => Promise<R>): Promise<R> {
    return new Promise<R>((resolve, reject) => {
      const place: Place = { ready: false, leave: () => undefined };
      this.places.push(place);
      const settle = (leave: () => void): void => {
        place.leave = leave;
        place.ready = true;
        this.release();
      };
      Promise.resolve(check).then(
        (checked) =>
          settle(() => {
            try {
              send(checked).then(resolve, reject);
            } catch (error) {
              reject(error);
            }
          }),
        (error: unknown) => settle(() => reject(error)),
      );
    });
  }

  /** Lets the ready places at the front leave, one after another in the same tick, so their sends keep the order. */
  private release(): void {
    while (this.places.length > 0 && this.places[0].ready) this.places.shift()!.leave();
  }
}
