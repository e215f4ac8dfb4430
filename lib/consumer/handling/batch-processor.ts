import type { EventrailMessage } from '../../events/eventrail-message';
import type { ResolvedConsumerOptions } from '../consumer.options';
import { EventValidationError } from '../../errors/event-validation.error';
import type { RawEntry } from '../../wire/codec';
import type { MetricsHooks } from '../../metrics/eventrail-metrics';
import { reportedFailures } from './batch-result';
import type { Delivery, Payload } from './delivery';
import type { BatchBinding } from './group-plan';
import { ABANDONED, HANDLED, PARKED, type Outcome } from './outcome';
import { validatedPayload } from './event-validation';
import { retryVerdict } from './retry-policy';
import type { StopSignal } from '../../util/stop-signal';

/** An entry of the batch with its decoded payload and where its outcome goes. */
interface Member {
  index: number;
  entry: RawEntry;
  payload: Payload;
}

/** Where a member's retries start: the attempt it failed (with its error), or the one it is about to make after a split. */
interface RetryStart {
  attempt: number;
  firstFailedAt: Date;
  /** The error of attempt `attempt`; absent when the member's next attempt runs at once (after a split). */
  error?: unknown;
  hasError: boolean;
}

/**
 * Runs a batch through a batch handler. Success handles every message in it.
 * A throw retries the whole batch with the group's backoff and retry budget;
 * once that is spent (or on a `NonRetryableError`) the batch splits, and
 * every message goes on alone, in log order, with what is left of the budget:
 * only the ones that fail alone are dead-lettered. Messages the handler
 * reports in `failed` go on alone the same way, from their failure.
 */
export class BatchProcessor {
  constructor(
    private readonly group: string,
    private readonly options: ResolvedConsumerOptions,
    private readonly metrics: MetricsHooks,
    private readonly delivery: Delivery,
  ) {}

  /** `firstAttempt` above 1: a parked message's redelivery, as a one-message batch. */
  async process(
    entries: readonly RawEntry[],
    binding: BatchBinding,
    partition: number,
    stop: StopSignal,
    firstAttempt = 1,
  ): Promise<Outcome[]> {
    const outcomes = new Array<Outcome>(entries.length).fill(ABANDONED);
    const members: Member[] = [];
    // The checks are part of the first attempt and share its handlerTimeoutMs: all start now, so hanging ones
    // are refused together when it runs out, not one budget after another; the handler gets what is left.
    const started = performance.now();
    const checks = await Promise.all(entries.map((entry) => this.checked(entry)));
    const leftMs = this.options.handlerTimeoutMs - (performance.now() - started);
    for (let index = 0; index < entries.length; index++) {
      const checked = checks[index];
      if ('malformed' in checked) {
        outcomes[index] = await this.delivery.giveUp(entries[index], partition, 'malformed', checked.malformed, 0, new Date());
        continue;
      }
      // A typed event: data its schema refuses is dead-lettered at once as `invalid` and stays out of the batch.
      if (checked instanceof EventValidationError) {
        outcomes[index] = await this.delivery.giveUp(entries[index], partition, 'invalid', checked, 0, new Date());
        continue;
      }
      members.push({ index, entry: entries[index], payload: checked });
    }
    if (members.length > 0) await this.runBatch(members, binding, partition, stop, outcomes, leftMs, firstAttempt);
    return outcomes;
  }

  /** An entry's payload as its handler gets it, the schema's refusal, or why it could not be decoded. Never throws. */
  private async checked(entry: RawEntry): Promise<Payload | EventValidationError | { malformed: unknown }> {
    let payload: Payload;
    try {
      payload = this.delivery.decode(entry);
    } catch (error) {
      return { malformed: error };
    }
    const schema = this.delivery.schemaOf(entry);
    return schema ? validatedPayload(schema, entry.event, payload, this.options.handlerTimeoutMs) : payload;
  }

  private async runBatch(
    members: Member[],
    binding: BatchBinding,
    partition: number,
    stop: StopSignal,
    outcomes: Outcome[],
    checksLeftMs: number,
    firstAttempt: number,
  ): Promise<void> {
    let firstFailedAt: Date | undefined;
    for (let attempt = firstAttempt; ; attempt++) {
      if (stop.stopped) return;
      const messages = members.map((m) => this.delivery.message(m.entry, m.payload, partition, attempt));
      let failures: Map<number, unknown>;
      try {
        failures = reportedFailures(
          binding.name,
          await this.call(binding, messages, attempt === firstAttempt ? checksLeftMs : undefined),
          messages,
        );
      } catch (error) {
        const now = new Date();
        this.metrics.emit('onHandlerError', this.group, members[0].entry.event, error, attempt);
        // Remembered under the batch's first entry: a batch after a restart starts at the same one.
        firstFailedAt ??= await this.delivery.failingSince(members[0].entry, partition, now, error);
        const verdict = retryVerdict(this.delivery.inPlace, attempt, error, firstFailedAt.getTime(), now.getTime());
        if ('giveUp' in verdict && firstAttempt > 1 && members.length === 1) {
          // A redelivered message alone: nothing to split; its failure goes where its redelivery decides.
          const [member] = members;
          outcomes[member.index] = await this.delivery.giveUp(member.entry, partition, verdict.giveUp, error, attempt, firstFailedAt, now);
          return;
        }
        if ('giveUp' in verdict) {
          // Split: each message alone, at once, with what is left of the budget.
          await this.each(members, partition, binding, stop, outcomes, () => ({
            attempt: attempt + 1,
            firstFailedAt: firstFailedAt!,
            hasError: false,
          }));
          return;
        }
        this.delivery.warnRetry(members[0].entry, partition, attempt, verdict.retryInMs, error, members.length);
        if (await this.delivery.pause(stop, verdict.retryInMs)) return;
        continue;
      }
      const failedAt = new Date();
      const pending: Member[] = [];
      members.forEach((member, i) => {
        if (failures.has(i)) pending.push(member);
        else outcomes[member.index] = HANDLED;
      });
      for (const [i, error] of failures) this.metrics.emit('onHandlerError', this.group, members[i].entry.event, error, attempt);
      await this.each(pending, partition, binding, stop, outcomes, async (member) => {
        const error = failures.get(members.indexOf(member));
        // Each reported message fails on its own from here: remembered under its own offset.
        const since = firstFailedAt ?? (await this.delivery.failingSince(member.entry, partition, failedAt, error));
        return { attempt, firstFailedAt: since, error, hasError: true };
      });
      return;
    }
  }

  /** Runs `members` alone one after another, in log order; stops at one that is left undone. */
  private async each(
    members: Member[],
    partition: number,
    binding: BatchBinding,
    stop: StopSignal,
    outcomes: Outcome[],
    start: (member: Member) => RetryStart | Promise<RetryStart>,
  ): Promise<void> {
    for (const member of members) {
      // With 'key' ordering, a message whose key parked earlier in this batch waits behind it. (The fetch kept
      // every message of an already parked key out of the batch, so a line's head met here is its redelivery.)
      if (this.delivery.parkedBehind(member.entry, partition, true)) {
        outcomes[member.index] = PARKED;
        continue;
      }
      outcomes[member.index] = await this.alone(member, partition, binding, stop, await start(member));
      if (outcomes[member.index] === ABANDONED) return;
    }
  }

  /** One message in one-message batches until it is handled, given up, or a stop cuts it short. */
  private async alone(member: Member, partition: number, binding: BatchBinding, stop: StopSignal, start: RetryStart): Promise<Outcome> {
    let { attempt, error, hasError } = start;
    for (;;) {
      if (hasError) {
        const now = new Date();
        const verdict = retryVerdict(this.delivery.inPlace, attempt, error, start.firstFailedAt.getTime(), now.getTime());
        if ('giveUp' in verdict)
          return this.delivery.giveUp(member.entry, partition, verdict.giveUp, error, attempt, start.firstFailedAt, now);
        this.delivery.warnRetry(member.entry, partition, attempt, verdict.retryInMs, error);
        if (await this.delivery.pause(stop, verdict.retryInMs)) return ABANDONED;
        attempt++;
      }
      if (stop.stopped) return ABANDONED;
      const messages = [this.delivery.message(member.entry, member.payload, partition, attempt)];
      try {
        const failures = reportedFailures(binding.name, await this.call(binding, messages), messages);
        if (failures.size === 0) return HANDLED;
        error = failures.get(0);
      } catch (caught) {
        error = caught;
      }
      this.metrics.emit('onHandlerError', this.group, member.entry.event, error, attempt);
      hasError = true;
    }
  }

  /** Calls the batch handler, failing the attempt with `HandlerTimeoutError` if it does not settle within `handlerTimeoutMs`. */
  private call(binding: BatchBinding, messages: EventrailMessage[], leftMs?: number): Promise<unknown> {
    return this.delivery.timed(binding.name, () => binding.call(messages), leftMs);
  }
}
