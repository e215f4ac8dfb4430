// Summarises a V8 CPU profile (`node --cpu-prof`): self time by origin
// (eventrail's lib/, each node_modules package, Node internals, GC, idle) and
// the functions with the most self time.
//
//   node -r @swc-node/register bench/tools/profile-summary.ts <file.cpuprofile> [--top N] [--skip-ms N] [--timeline]
//
// --skip-ms leaves out the first N ms (a process's startup: module loading and
// compilation); --timeline prints the busy time per 250 ms to choose N.
import { readFileSync } from 'node:fs';

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  children?: number[];
}

interface CpuProfile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
}

/** Where a function comes from: `lib/`, a package, `bench/`, Node itself, or V8's pseudo-frames. */
function origin(node: ProfileNode): string {
  const { url, functionName } = node.callFrame;
  if (!url) return functionName.startsWith('(') ? functionName : '(native)';
  const pkg = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(url);
  if (pkg) return pkg[1];
  if (url.startsWith('node:')) return 'node internals';
  const local = /\/(lib|bench|test|sample)\//.exec(url);
  return local ? `${local[1]}/` : url;
}

function table(title: string, totals: Map<string, number>, all: number, top: number): string {
  const rows = [...totals].sort((a, b) => b[1] - a[1]).slice(0, top);
  return [
    title,
    ...rows.map(([name, us]) => `  ${((us / all) * 100).toFixed(1).padStart(5)}%  ${(us / 1000).toFixed(0).padStart(7)} ms  ${name}`),
  ].join('\n');
}

function option(name: string): string | undefined {
  const index = process.argv.indexOf(name);
  return index > 0 ? process.argv[index + 1] : undefined;
}

/** Busy (not idle) ms per 250 ms of the profile. */
function timeline(profile: CpuProfile, byId: Map<number, ProfileNode>): string {
  const buckets: number[] = [];
  let at = 0;
  profile.samples.forEach((id, i) => {
    at += profile.timeDeltas[i] ?? 0;
    const bucket = Math.floor(at / 250_000);
    if (byId.get(id)?.callFrame.functionName !== '(idle)') buckets[bucket] = (buckets[bucket] ?? 0) + (profile.timeDeltas[i] ?? 0);
  });
  return Array.from(buckets, (us, i) => `  ${String(i * 250).padStart(6)} ms  ${'#'.repeat(Math.round((us ?? 0) / 10_000))}`).join('\n');
}

function main(): void {
  const file = process.argv[2];
  if (!file || file.startsWith('--')) throw new Error('usage: profile-summary.ts <file.cpuprofile> [--top N] [--skip-ms N] [--timeline]');
  const top = Number(option('--top') ?? 25);
  const skipUs = Number(option('--skip-ms') ?? 0) * 1000;
  const profile = JSON.parse(readFileSync(file, 'utf8')) as CpuProfile;
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  if (process.argv.includes('--timeline')) console.log(`Busy time per 250 ms (# = 10 ms):\n${timeline(profile, byId)}\n`);
  const self = new Map<number, number>();
  let at = 0;
  profile.samples.forEach((id, i) => {
    at += profile.timeDeltas[i] ?? 0;
    if (at >= skipUs) self.set(id, (self.get(id) ?? 0) + (profile.timeDeltas[i] ?? 0));
  });
  let all = 0;
  const byOrigin = new Map<string, number>();
  const byFunction = new Map<string, number>();
  for (const [id, us] of self) {
    const node = byId.get(id) as ProfileNode;
    if (node.callFrame.functionName === '(idle)') continue;
    all += us;
    const where = origin(node);
    byOrigin.set(where, (byOrigin.get(where) ?? 0) + us);
    const { functionName, url, lineNumber } = node.callFrame;
    const name = `${functionName || '(anonymous)'} ${url.replace(/^.*\/(node_modules|lib|bench)\//, '$1/')}:${lineNumber + 1}`;
    byFunction.set(name, (byFunction.get(name) ?? 0) + us);
  }
  console.log(`${file}: ${(all / 1000).toFixed(0)} ms busy (idle left out)\n`);
  console.log(table('Self time by origin:', byOrigin, all, top));
  console.log('');
  console.log(table('Self time by function:', byFunction, all, top));
}

main();
