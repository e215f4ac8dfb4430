import { execFile, execFileSync, spawnSync } from 'node:child_process';

/**
 * "Another machine" for tests: a network namespace joined to this one by a veth pair with a private /30
 * of its own (10.200.<n>.1 here, 10.200.<n>.2 there). Requests sent from inside it arrive with a
 * non-loopback peer address, whatever headers they carry. Needs root and `ip netns`.
 */
export interface RemoteNamespace {
  /** This side's address: bind the app here (or on 0.0.0.0). */
  hostAddress: string;
  /** The caller's address, as the app sees it. */
  remoteAddress: string;
  /** Runs curl inside the namespace (asynchronously: the app answering it runs in this process); answers the status and body. */
  curl(url: string, args?: string[]): Promise<{ status: number; body: string }>;
  remove(): void;
}

/** Why namespaces cannot be made here, or `null` when they can. */
export function netnsUnavailable(): string | null {
  if (process.getuid?.() !== 0) return 'not running as root';
  const ip = spawnSync('ip', ['netns', 'list'], { encoding: 'utf8' });
  if (ip.error || ip.status !== 0) return `\`ip netns\` does not work here (${ip.error?.message ?? ip.stderr.trim()})`;
  const curl = spawnSync('curl', ['--version'], { encoding: 'utf8' });
  if (curl.error || curl.status !== 0) return 'curl is not installed';
  return null;
}

export function createRemoteNamespace(): RemoteNamespace {
  // Unique per process, so parallel runs (and other suites) never share a name or a subnet.
  const n = 20 + (process.pid % 200);
  const name = `evd-${process.pid}`;
  const [here, there] = [`evd${process.pid}a`, `evd${process.pid}b`].map((link) => link.slice(0, 15));
  const hostAddress = `10.200.${n}.1`;
  const remoteAddress = `10.200.${n}.2`;
  const ip = (...args: string[]): void => void execFileSync('ip', args, { stdio: 'pipe' });
  const remove = (): void => {
    spawnSync('ip', ['link', 'del', here], { stdio: 'ignore' }); // takes its peer with it
    spawnSync('ip', ['netns', 'del', name], { stdio: 'ignore' });
  };
  remove(); // a namespace left by an interrupted run of this pid
  try {
    ip('netns', 'add', name);
    ip('link', 'add', here, 'type', 'veth', 'peer', 'name', there);
    ip('link', 'set', there, 'netns', name);
    ip('addr', 'add', `${hostAddress}/30`, 'dev', here);
    ip('link', 'set', here, 'up');
    ip('netns', 'exec', name, 'ip', 'addr', 'add', `${remoteAddress}/30`, 'dev', there);
    ip('netns', 'exec', name, 'ip', 'link', 'set', there, 'up');
    ip('netns', 'exec', name, 'ip', 'link', 'set', 'lo', 'up');
  } catch (error) {
    remove();
    throw error;
  }
  return {
    hostAddress,
    remoteAddress,
    curl(url, args = []) {
      return new Promise((resolve, reject) => {
        const argv = ['netns', 'exec', name, 'curl', '-s', '-m', '10', '-w', '\n%{http_code}', ...args, url];
        execFile('ip', argv, { encoding: 'utf8' }, (error, stdout, stderr) => {
          if (error) return reject(new Error(`curl from ${remoteAddress} failed: ${error.message} ${stderr}`));
          const end = stdout.lastIndexOf('\n');
          resolve({ status: Number(stdout.slice(end + 1)), body: stdout.slice(0, end) });
        });
      });
    },
    remove,
  };
}
