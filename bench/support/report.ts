import type { MetricSpec, Size } from './scenario';
import { Summary, summarize } from './stats';

export interface VariantResult {
  id: string;
  label: string;
  events: number;
  /** One entry per completed round. */
  rounds: Array<Record<string, number>>;
}

export interface TargetResult {
  label: string;
  perRound: number[];
  summary?: Summary;
  atLeast?: number;
  atMost?: number;
  /** The values are differences (variant - reference), judged against the bound in the metric's unit. */
  difference?: boolean;
  /** Undefined for a ratio reported for information, or when no round completed. */
  met?: boolean;
  /** Rounds left out because the reference was more than `quietFactor` times its quiet value. */
  dropped?: number;
}

export interface ScenarioResult {
  id: string;
  title: string;
  metrics: MetricSpec[];
  variants: VariantResult[];
  targets: TargetResult[];
  errors: string[];
  seconds: number;
  /** The host's 1-minute load average when the scenario started and ended: other work skews absolute numbers. */
  load: [number, number];
}

export interface PassResult {
  redis: string;
  redisVersion: string;
  scenarios: ScenarioResult[];
  seconds: number;
  /** Targets are judged on this pass (the first without persistence); the others are reported only. */
  judged: boolean;
}

export interface BenchResult {
  date: string;
  size: Size;
  machine: { nproc: number; cpu: string; node: string; os: string };
  passes: PassResult[];
  seconds: number;
}

export function formatNumber(value: number, digits: number): string {
  if (!Number.isFinite(value)) return String(value);
  return value.toLocaleString('en-US', { minimumFractionDigits: digits, maximumFractionDigits: digits });
}

function metricLabel(metric: MetricSpec): string {
  return metric.key === 'rate' ? metric.unit : `${metric.key} (${metric.unit})`;
}

function bound(target: TargetResult): string {
  if (target.atLeast !== undefined) return `>= ${target.atLeast}`;
  if (target.atMost !== undefined) return `<= ${target.atMost}`;
  return '(info)';
}

/** "met", "missed by 4.7%", "-" for information only, or "not judged" in a quick run. */
export function verdict(target: TargetResult): string {
  if (!target.summary) return 'not measured';
  if (target.met === undefined) return target.atLeast === undefined && target.atMost === undefined ? '-' : 'not judged here';
  if (target.met) return 'met';
  const median = target.summary.median;
  if (target.difference) {
    const by = target.atLeast !== undefined ? target.atLeast - median : median - (target.atMost as number);
    return `**missed** by ${formatNumber(by, 2)}`;
  }
  const short = target.atLeast !== undefined ? 1 - median / target.atLeast : median / (target.atMost as number) - 1;
  return `**missed** by ${(short * 100).toFixed(1)}%`;
}

function ratioDigits(target: TargetResult): number {
  const scale = target.atLeast ?? target.atMost ?? 1;
  return scale >= 10 ? 1 : 2;
}

function range(summary: Summary, digits: number): string {
  return `${formatNumber(summary.min, digits)}–${formatNumber(summary.max, digits)}`;
}

/** The median's bootstrap interval (5th–95th percentile of resampled medians). */
function interval(summary: Summary, digits: number): string {
  return `${formatNumber(summary.low, digits)}–${formatNumber(summary.high, digits)}`;
}

/** The Markdown tables of one pass: measurements, then ratios and targets. */
export function passMarkdown(pass: PassResult): string {
  const lines = [
    `### Redis ${pass.redisVersion}, ${pass.redis}${pass.judged ? ' (targets judged on this pass)' : ' (ratios reported, not judged)'}`,
    '',
    '| scenario | system | events | metric | median | min–max | rounds |',
    '|---|---|---:|---|---:|---:|---:|',
  ];
  for (const scenario of pass.scenarios) {
    for (const variant of scenario.variants) {
      if (variant.rounds.length === 0) continue;
      for (const metric of scenario.metrics) {
        const summary = summarize(variant.rounds.map((r) => r[metric.key]));
        lines.push(
          `| ${scenario.title} | ${variant.label} | ${formatNumber(variant.events, 0)} | ${metricLabel(metric)} | ` +
            `${formatNumber(summary.median, metric.digits)} | ${range(summary, metric.digits)} | ${variant.rounds.length} |`,
        );
      }
    }
  }
  lines.push('', '| ratio or value | per round | median [bootstrap 5–95%] (min–max) | target | result |', '|---|---|---|---|---|');
  for (const scenario of pass.scenarios) {
    for (const target of scenario.targets) {
      const digits = ratioDigits(target);
      const rounds = target.perRound.map((v) => formatNumber(v, digits)).join(', ');
      const median = target.summary
        ? `${formatNumber(target.summary.median, digits)} [${interval(target.summary, digits)}] (${range(target.summary, digits)})`
        : '-';
      const dropped = target.dropped ? ` (${target.dropped} noisy round(s) left out)` : '';
      lines.push(`| ${target.label} | ${rounds}${dropped} | ${median} | ${bound(target)} | ${verdict(target)} |`);
    }
  }
  const load = pass.scenarios.map((s) => `${s.id} ${s.load.map((l) => l.toFixed(1)).join('→')}`).join(', ');
  lines.push('', `1-minute load average at the start and end of each scenario: ${load}.`);
  const errors = pass.scenarios.flatMap((s) => s.errors.map((e) => `- ${s.title}: ${e}`));
  if (errors.length > 0) lines.push('', 'Errors:', '', ...errors);
  return lines.join('\n');
}

export function resultMarkdown(result: BenchResult): string {
  const { machine } = result;
  const header = [
    `## Benchmark (${result.size} run, ${result.date}, ${Math.round(result.seconds)} s)`,
    '',
    `${machine.nproc} CPUs (${machine.cpu}), Node ${machine.node}, ${machine.os}.`,
  ];
  return [...header, ...result.passes.map((pass) => `\n${passMarkdown(pass)}`)].join('\n') + '\n';
}

/** A scenario's console block: every variant's rounds and summary, then the ratios. */
export function scenarioText(scenario: ScenarioResult): string {
  const load = scenario.load.map((l) => l.toFixed(1)).join('→');
  const lines = [`\n== ${scenario.title} (${scenario.seconds.toFixed(1)} s, load average ${load}) ==`];
  for (const variant of scenario.variants) {
    for (const metric of scenario.metrics) {
      const values = variant.rounds.map((r) => r[metric.key]);
      if (values.length === 0) continue;
      const s = summarize(values);
      lines.push(
        `  ${variant.label.padEnd(44)} ${metricLabel(metric).padEnd(16)} median ${formatNumber(s.median, metric.digits).padStart(10)}` +
          `  (${range(s, metric.digits)})  rounds: ${values.map((v) => formatNumber(v, metric.digits)).join(' ')}`,
      );
    }
  }
  for (const target of scenario.targets) {
    const digits = ratioDigits(target);
    const s = target.summary;
    const median = s ? `${formatNumber(s.median, digits)} [${interval(s, digits)}] (${range(s, digits)})` : '-';
    lines.push(
      `  > ${target.label}: ${median}  rounds: ${target.perRound.map((v) => formatNumber(v, digits)).join(' ')}  ` +
        `target ${bound(target)}: ${verdict(target).replace(/\*/g, '')}`,
    );
  }
  for (const error of scenario.errors) lines.push(`  ! ${error}`);
  return lines.join('\n');
}
