// The last few minutes of lag per group and of log throughput, sampled from each overview and kept in memory only:
// the server keeps no history, so the charts start empty on each page load.

import { lineChart } from './chart.js';
import { num } from './format.js';

const HISTORY_MS = 5 * 60_000;

/** group name -> [{ t, lags: number[] }] */
const lagHistory = new Map();
/** [{ t, rate }] in events per second */
let throughput = [];
let lastAdded = null;

/** Adds a sample from `overview` and drops those older than the window. */
export function recordSamples(overview) {
  const t = Date.parse(overview.time) || Date.now();
  const since = t - HISTORY_MS;
  const names = new Set();
  for (const group of overview.groups) {
    names.add(group.name);
    const samples = (lagHistory.get(group.name) ?? []).filter((s) => s.t >= since && s.t < t);
    samples.push({ t, lags: group.partitions.map((p) => p.lag) });
    lagHistory.set(group.name, samples);
  }
  for (const name of [...lagHistory.keys()]) if (!names.has(name)) lagHistory.delete(name);

  const total = overview.log.entriesAdded;
  if (total === null || total === undefined) return;
  const last = lastAdded;
  if (last && t > last.t && total >= last.total) {
    throughput = throughput.filter((s) => s.t >= since);
    throughput.push({ t, rate: (total - last.total) / ((t - last.t) / 1000) });
  }
  lastAdded = { t, total };
}

/** Events appended per second at the last sample, or undefined before two samples. */
export function latestThroughput() {
  return throughput[throughput.length - 1]?.rate;
}

export function throughputChart() {
  return lineChart({
    series: [{ label: 'events/s', points: throughput.map((s) => ({ t: s.t, v: s.rate })) }],
    testid: 'throughput-chart',
    label: 'Events appended per second',
    format: (v) => (v >= 10 ? num(Math.round(v)) : Number(v.toFixed(1)).toString()),
    legend: false,
  });
}

export function lagChart(groupName, size = { width: 480, height: 120 }) {
  const samples = lagHistory.get(groupName) ?? [];
  const partitions = Math.max(0, ...samples.map((s) => s.lags.length));
  const series = Array.from({ length: partitions }, (_, p) => ({
    label: `P${p}`,
    points: samples.filter((s) => p < s.lags.length).map((s) => ({ t: s.t, v: s.lags[p] })),
  }));
  return lineChart({ series, testid: 'lag-chart', label: `Lag per partition of ${groupName}`, ...size });
}
