// A small SVG line chart over time, drawn with createElementNS like the rest of the page.

import { h, svg } from './dom.js';
import { duration, num } from './format.js';

function niceCeil(value) {
  if (value <= 1) return 1;
  const magnitude = 10 ** Math.floor(Math.log10(value));
  for (const step of [1, 2, 2.5, 5, 10]) if (step * magnitude >= value) return step * magnitude;
  return 10 * magnitude;
}

/**
 * A line chart of `series` ([{ label, points: [{ t, v }] }]) over time, one
 * polyline each; colors come from the `s0`..`s7` classes in style.css.
 */
export function lineChart({ series, testid, label, format = num, legend = true, width = 480, height = 150 }) {
  const pad = { left: 44, right: 10, top: 10, bottom: 22 };
  const points = series.flatMap((s) => s.points);
  const wrap = h('figure', { class: 'chart', testid });
  const chart = svg('svg', { viewBox: `0 0 ${width} ${height}`, role: 'img', 'aria-label': label, class: 'chart-svg' });
  wrap.append(chart);
  if (points.length === 0) {
    chart.append(svg('text', { x: width / 2, y: height / 2, class: 'chart-empty', 'text-anchor': 'middle' }, 'Collecting samples…'));
    return wrap;
  }
  const tMax = Math.max(...points.map((p) => p.t));
  // The window grows with the samples kept, up to the five minutes history.js keeps.
  const tMin = Math.min(Math.min(...points.map((p) => p.t)), tMax - 1000);
  const yMax = niceCeil(Math.max(...points.map((p) => p.v)));
  const x = (t) => pad.left + ((t - tMin) / (tMax - tMin)) * (width - pad.left - pad.right);
  const y = (v) => height - pad.bottom - (v / yMax) * (height - pad.top - pad.bottom);

  for (const v of [0, yMax / 2, yMax]) {
    chart.append(
      svg('line', { x1: pad.left, x2: width - pad.right, y1: y(v), y2: y(v), class: 'chart-grid' }),
      svg('text', { x: pad.left - 6, y: y(v) + 4, class: 'chart-label', 'text-anchor': 'end' }, format(v)),
    );
  }
  chart.append(
    svg('text', { x: pad.left, y: height - 6, class: 'chart-label' }, `${duration(tMax - tMin)} ago`),
    svg('text', { x: width - pad.right, y: height - 6, class: 'chart-label', 'text-anchor': 'end' }, 'now'),
  );
  series.forEach((s, i) => {
    const color = `s${i % 8}`;
    if (s.points.length > 1) {
      const coords = s.points.map((p) => `${x(p.t).toFixed(1)},${y(p.v).toFixed(1)}`).join(' ');
      chart.append(svg('polyline', { points: coords, class: `chart-line ${color}` }, svg('title', {}, s.label)));
    }
    const last = s.points[s.points.length - 1];
    if (last) chart.append(svg('circle', { cx: x(last.t), cy: y(last.v), r: 2.5, class: `chart-dot ${color}` }));
  });
  if (legend) {
    wrap.append(
      h(
        'figcaption',
        { class: 'legend' },
        series.map((s, i) => h('span', { class: 'legend-item' }, h('span', { class: `swatch s${i % 8}` }), s.label)),
      ),
    );
  }
  return wrap;
}
