import { spawnSync } from 'node:child_process';

/**
 * Reading Prometheus text exposition in tests: `promtool check metrics`
 * (Debian's `prometheus` package) where it is installed, and always a strict
 * line parser of the format's sample lines, so the checks never depend on
 * promtool being there.
 */

export interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

/** Why promtool cannot be used here, or null when it can. */
export function promtoolUnavailable(): string | null {
  const run = spawnSync('promtool', ['--version'], { encoding: 'utf8' });
  return run.error || run.status !== 0 ? 'promtool is not installed (apt-get install prometheus)' : null;
}

/** promtool's verdict on `text`: null when it passes both parsing and linting, else what it said. */
export function promtoolProblems(text: string): string | null {
  const run = spawnSync('promtool', ['check', 'metrics'], { input: text, encoding: 'utf8' });
  if (run.error) throw run.error;
  return run.status === 0 ? null : `exit ${run.status}: ${run.stdout}${run.stderr}`.trim();
}

const NAME = '[a-zA-Z_:][a-zA-Z0-9_:]*';
const SAMPLE = new RegExp(`^(${NAME})(?:\\{(.*)\\})? (\\S+)(?: -?\\d+)?$`);
const LABEL = /^([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"(?:,|$)/;
const COMMENT = new RegExp(`^# (?:HELP ${NAME} .*|TYPE ${NAME} (?:counter|gauge|histogram|summary|untyped))$`);

/** Every sample of `text`; throws on a line that is not a comment, a sample or empty, and on a series given twice. */
export function parseExposition(text: string): Sample[] {
  const samples: Sample[] = [];
  const seen = new Set<string>();
  for (const [i, line] of text.split('\n').entries()) {
    if (line === '' || COMMENT.test(line)) continue;
    const match = SAMPLE.exec(line);
    if (!match) throw new Error(`line ${i + 1} is not a sample: ${line}`);
    const labels: Record<string, string> = {};
    let rest = match[2] ?? '';
    while (rest !== '') {
      const label = LABEL.exec(rest);
      if (!label) throw new Error(`line ${i + 1} has a malformed label set: ${line}`);
      labels[label[1]] = label[2].replace(/\\n/g, '\n').replace(/\\(["\\])/g, '$1');
      rest = rest.slice(label[0].length);
    }
    const value = Number(match[3]);
    if (Number.isNaN(value) && match[3] !== 'NaN') throw new Error(`line ${i + 1} has no number: ${line}`);
    const series = `${match[1]}${JSON.stringify(Object.entries(labels).sort())}`;
    if (seen.has(series)) throw new Error(`line ${i + 1} repeats the series ${series}`);
    seen.add(series);
    samples.push({ name: match[1], labels, value });
  }
  return samples;
}

/** The value of the one sample of `name` with `labels` (exactly those); throws when there is none. */
export function valueOf(samples: readonly Sample[], name: string, labels: Record<string, string>): number {
  const want = JSON.stringify(Object.entries(labels).sort());
  const found = samples.find((s) => s.name === name && JSON.stringify(Object.entries(s.labels).sort()) === want);
  if (!found) throw new Error(`no sample ${name}${want}`);
  return found.value;
}
