// Plain text out of numbers, sizes, times and payloads; no DOM, so any module can use it.

export function num(n) {
  return n === null || n === undefined ? '—' : Number(n).toLocaleString('en-US');
}

export function humanBytes(bytes) {
  if (bytes === null || bytes === undefined) return 'n/a';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let value = bytes;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return `${value.toFixed(unit === 0 ? 0 : 1)} ${units[unit]}`;
}

export function millis(ms) {
  return `${ms < 1 ? ms.toFixed(2) : ms < 10 ? ms.toFixed(1) : Math.round(ms)} ms`;
}

export function duration(ms) {
  if (ms === null || ms === undefined) return '—';
  const s = Math.abs(ms) / 1000;
  if (s < 10) return `${s.toFixed(1)} s`;
  if (s < 90) return `${Math.round(s)} s`;
  if (s < 90 * 60) return `${Math.round(s / 60)} min`;
  if (s < 36 * 3600) return `${Math.round(s / 3600)} h`;
  return `${Math.round(s / 86400)} d`;
}

export function ago(iso) {
  if (!iso) return '—';
  const ms = Date.now() - Date.parse(iso);
  return ms < 0 ? `in ${duration(-ms)}` : `${duration(ms)} ago`;
}

export function dateTime(iso) {
  return iso ? new Date(iso).toLocaleString() : '—';
}

/** A group's total lag; `+` when a partition's lag was too large to count exactly. */
export function lagText(group) {
  return `${num(group.lag)}${group.partitions.some((p) => p.lagCapped) ? '+' : ''}`;
}

export function json(value) {
  if (typeof value === 'string') return value;
  return JSON.stringify(value, null, 2) ?? String(value);
}
