/** What one append in a coalesced batch came to: an error, or Redis's reply. */
export type AppendReply = [error: Error | null, reply: unknown];

/** How long an append may wait for its answer, and the error it gets when that passes. */
export interface AppendDeadline {
  ms: number;
  /** The error of one append that had no answer in time (it was sent: it may still land). */
  timedOut: () => Error;
}

/**
 * What a caller of `add` gets: its reply turned into its result, and an error
 * (its own, its batch's or the deadline's) into its error, in the one promise
 * `add` returns rather than in a `then` of the caller's (a promise and two
 * functions less per `publish`).
 */
export interface AppendAnswers<T, R> {
  answer(item: T, reply: unknown): R;
  failure(item: T, error: unknown): unknown;
}

/**
 * Most appends of one command of `sendTogether`: a tick's queue of more goes as several, in order, so Redis
 * runs and answers the first while the next ones arrive, and their callers go on meanwhile. One
 * transaction for a whole tick made 1000 callers wait for all of it: 169,000 publish calls/s against
 * 311,000-355,000 in parts of 128 (bench publish-callers, separate cores, 7 rounds).
 */
const TOGETHER_MOST = 128;

interface Waiting<T, R> {
  item: T;
  resolve: (result: R) => void;
  reject: (error: unknown) => void;
  /** Answered (or failed): the deadline leaves it alone. */
  done: boolean;
  deadline: TickDeadline<T, R>;
}

/** The appends added in one tick, under one timer. */
interface TickDeadline<T, R> {
  waiting: Array<Waiting<T, R>>;
  /** How many of them have no answer yet: the timer goes when none is left. */
  open: number;
  timer?: ReturnType<typeof setTimeout>;
}

/**
 * Coalesces the appends of concurrent `publish` calls. The first append of a
 * tick leaves at once, on its own, as a plain call would; appends that follow
 * it in the same tick (a loop of calls, or every caller that a reply woke up)
 * are queued and leave together on the next `process.nextTick`, before any
 * I/O: a thousand callers cost a few socket writes instead of a thousand (the
 * queued appends sent as transactions of at most `TOGETHER_MOST` where
 * `sendTogether` can, else one by one with the socket corked, or as a
 * pipeline where it cannot be). The
 * first one is not held back for the others: held, two events published in
 * one tick reached Redis in one read, and the second
 * waited for the consumer's next read round trip (0.06 ms more at the median
 * at 2000 events/s). Unlike ioredis's `enableAutoPipelining`, a batch never
 * waits for the previous one to be answered, and nothing else on the
 * connection (commits, lease renewals) is held back by it.
 *
 * With a `deadline`, an append not answered within `deadline.ms` of its call
 * rejects with `deadline.timedOut()`. The appends of one tick share one timer,
 * armed when the tick ends (so each gets at least its `ms`) and cleared when
 * the last of them is answered: a timer of its own cost each `publish` of a
 * thousand callers about 1.2 µs of CPU (7.3 -> 6.1 µs an event).
 *
 * Order: appends leave in the order they were added; `flush()` sends what is
 * queued at once, so an append sent another way afterwards (a `publishMany`)
 * cannot overtake it.
 */
export class AppendCoalescer<T, R = unknown> {
  private queue: Array<Waiting<T, R>> = [];
  /** An append left at once in this tick: the next ones of the tick are queued. */
  private sentThisTick = false;
  /** The deadline of the appends added since the last tick ended. */
  private tickDeadline?: TickDeadline<T, R>;

  constructor(
    /** Sends one append on its own: a lone caller pays no pipeline. */
    private readonly sendOne: (item: T) => Promise<unknown>,
    /** Sends many in one pipeline; one reply per item, in order. */
    private readonly sendMany: (items: T[]) => Promise<AppendReply[]>,
    /**
     * Runs a write of several `sendOne` calls so they leave in one socket
     * write (`corkedWrite`); false when it cannot, and `sendMany` is used.
     */
    private readonly corked?: (write: () => void) => boolean,
    private readonly deadline?: AppendDeadline,
    private readonly answers?: AppendAnswers<T, R>,
    /**
     * Sends many as one command whose answer holds each one's reply, in order,
     * an `Error` for one that failed (a transaction); undefined, with nothing
     * sent, when they cannot go that way now (then `corked` or `sendMany`).
     */
    private readonly sendTogether?: (items: T[]) => Promise<ReadonlyArray<unknown>> | undefined,
  ) {}

  /**
   * Sends or queues `item`; settles with its reply, or rejects with its error (or the batch's, or the
   * deadline's), as `answers` turn them.
   */
  add(item: T): Promise<R> {
    return new Promise<R>((resolve, reject) => {
      const deadline = (this.tickDeadline ??= this.openDeadline());
      const waiting: Waiting<T, R> = { item, resolve, reject, done: false, deadline };
      deadline.waiting.push(waiting);
      deadline.open++;
      if (!this.sentThisTick && this.queue.length === 0) {
        this.sentThisTick = true;
        process.nextTick(this.endTick);
        this.send(waiting);
      } else if (this.queue.push(waiting) === 1) process.nextTick(this.flush);
    });
  }

  private readonly endTick = (): void => {
    this.sentThisTick = false;
  };

  /** Sends what is queued now (a no-op when nothing is). */
  readonly flush = (): void => {
    let batch = this.queue;
    if (batch.length === 0) return;
    this.queue = [];
    if (batch.length === 1) {
      this.send(batch[0]);
      return;
    }
    if (this.sendTogether) {
      let from = 0;
      while (from < batch.length) {
        const part = batch.slice(from, from + TOGETHER_MOST);
        if (!this.sendPartTogether(part)) break;
        from += part.length;
      }
      if (from === batch.length) return;
      if (from > 0) batch = batch.slice(from);
    }
    this.sendApart(batch);
  };

  /**
   * Sends `part` as one command (`sendTogether`) and settles each of its appends from the answer;
   * false, with nothing sent, where it cannot go that way.
   */
  private sendPartTogether(part: Array<Waiting<T, R>>): boolean {
    const items = new Array<T>(part.length);
    for (let i = 0; i < part.length; i++) items[i] = part[i].item;
    const together = this.sendTogether?.(items);
    if (!together) return false;
    together.then(
      (replies) => {
        for (let i = 0; i < part.length; i++) {
          const reply = replies[i];
          this.settle(part[i], reply instanceof Error, reply);
        }
      },
      (error: unknown) => {
        for (const waiting of part) this.settle(waiting, true, error);
      },
    );
    return true;
  }

  /** Sends `batch` one append at a time, corked into one socket write where it can, else as one pipeline. */
  private sendApart(batch: Array<Waiting<T, R>>): void {
    if (this.corked?.(() => this.sendEach(batch))) return;
    const items = new Array<T>(batch.length);
    for (let i = 0; i < batch.length; i++) items[i] = batch[i].item;
    this.sendMany(items).then(
      (replies) => {
        for (let i = 0; i < batch.length; i++) {
          const [error, reply] = replies[i] ?? [new Error('no reply'), null];
          if (error) this.settle(batch[i], true, error);
          else this.settle(batch[i], false, reply);
        }
      },
      (error: unknown) => {
        for (const waiting of batch) this.settle(waiting, true, error);
      },
    );
  }

  private sendEach(batch: Array<Waiting<T, R>>): void {
    for (const waiting of batch) this.send(waiting);
  }

  private send(waiting: Waiting<T, R>): void {
    let sent: Promise<unknown>;
    try {
      sent = this.sendOne(waiting.item);
    } catch (error) {
      this.settle(waiting, true, error);
      return;
    }
    sent.then(
      (reply) => this.settle(waiting, false, reply),
      (error: unknown) => this.settle(waiting, true, error),
    );
  }

  /** A deadline for the appends of this tick; its timer is armed when the tick ends, if any of them is still open. */
  private openDeadline(): TickDeadline<T, R> {
    const deadline: TickDeadline<T, R> = { waiting: [], open: 0 };
    process.nextTick(() => {
      if (this.tickDeadline === deadline) this.tickDeadline = undefined;
      if (this.deadline && deadline.open > 0) deadline.timer = setTimeout(this.expire, this.deadline.ms, deadline);
    });
    return deadline;
  }

  /** The deadline passed: every append of its tick still without an answer rejects. */
  private readonly expire = (deadline: TickDeadline<T, R>): void => {
    deadline.timer = undefined;
    const { waiting } = deadline;
    deadline.waiting = [];
    for (const one of waiting) if (!one.done) this.settle(one, true, this.deadline!.timedOut());
  };

  /** Settles one append (once: a late answer after its deadline is absorbed) and clears its tick's timer after the last. */
  private settle(waiting: Waiting<T, R>, failed: boolean, value: unknown): void {
    if (waiting.done) return;
    waiting.done = true;
    const { answers } = this;
    if (!answers) {
      if (failed) waiting.reject(value);
      else waiting.resolve(value as R);
    } else if (failed) waiting.reject(answers.failure(waiting.item, value));
    else {
      try {
        waiting.resolve(answers.answer(waiting.item, value));
      } catch (error) {
        waiting.reject(error);
      }
    }
    const { deadline } = waiting;
    if (--deadline.open === 0 && deadline.timer !== undefined) {
      clearTimeout(deadline.timer);
      deadline.timer = undefined;
    }
  }
}
