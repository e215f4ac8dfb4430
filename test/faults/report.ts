import type { RunFigures } from './run-schedule';
import { FAULT_KINDS, FaultKind } from './schedule';

/** Sums of the figures over every run. */
export function summarize(runs: readonly RunFigures[]): string {
  const sum = (f: (r: RunFigures) => number): number => runs.reduce((s, r) => s + f(r), 0);
  const faults = Object.fromEntries(FAULT_KINDS.map((k) => [k, sum((r) => r.faults[k])])) as Record<FaultKind, number>;
  const violating = runs.filter((r) => r.violations.length > 0);
  return [
    `${runs.length} schedules in ${Math.round(sum((r) => r.ms) / 1000)} s: ${sum((r) => r.published)} events published ` +
      `(${sum((r) => r.accepted)} accepted, ${sum((r) => r.rejected)} rejected, ${sum((r) => r.refusedFull ?? 0)} of them refused by a full Redis), ${sum((r) => r.logEntries)} log entries, ` +
      `${sum((r) => r.handlings)} handlings (${sum((r) => r.repeatHandlings)} repeats), ${sum((r) => r.deadLetters)} dead letters ` +
      `(${sum((r) => r.replayed)} replayed), ${sum((r) => r.offsetSamples)} offset samples`,
    `faults: ${FAULT_KINDS.map((k) => `${k} ${faults[k]}`).join(', ')} (${sum((r) => r.skipped.length)} skipped)`,
    `violations: ${sum((r) => r.violations.length)} in ${violating.length} schedules${violating.length ? ` (seeds ${violating.map((r) => r.seed).join(', ')})` : ''}`,
  ].join('\n');
}

export function describeRun(r: RunFigures): string {
  const faults = FAULT_KINDS.filter((k) => r.faults[k] > 0)
    .map((k) => `${k} ${r.faults[k]}`)
    .join(', ');
  return (
    `seed ${r.seed}: ${r.violations.length} violations in ${r.ms} ms; ${r.accepted}/${r.published} accepted, ${r.logEntries} log entries, ` +
    `${r.handlings} handlings (${r.repeatHandlings} repeats), ${r.deadLetters} dead letters (${r.replayed} replayed); faults: ${faults || 'none'}` +
    (r.refusedFull ? `; ${r.refusedFull} events refused by a full Redis` : '') +
    (Object.keys(r.rejections ?? {}).length ? `; rejected calls: ${JSON.stringify(r.rejections)}` : '') +
    (r.skipped.length ? `\n  skipped: ${r.skipped.join('; ')}` : '')
  );
}
