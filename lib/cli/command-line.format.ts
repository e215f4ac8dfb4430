import type { GlobalOptions } from './cli.context';
import { redactUrl } from './value.format';

/** A command line printed for the operator to run next (the next page of `dlq list`). */
export interface PrintedCommand {
  /** `eventrail <global flags> <args>`, each word quoted for a POSIX shell where it needs it. */
  text: string;
  /** `--redis-url` carried a password, printed as `***`: the command does not run as it stands. */
  passwordRedacted: boolean;
}

// Words made of these need no quotes in sh, bash or zsh.
const PLAIN_WORD = /^[\w@%+=:,./-]+$/;

/**
 * `eventrail` with the global flags typed on this run and `args`. Only typed
 * flags are repeated: what came from EVENTRAIL_* variables still comes from
 * them in the same shell, and a URL from the environment keeps its password
 * off the screen. A typed URL's password is printed as `***`.
 */
export function formatCommandLine(typed: Partial<GlobalOptions>, args: readonly string[]): PrintedCommand {
  const words = ['eventrail'];
  let passwordRedacted = false;
  if (typed.redisUrl !== undefined) {
    const seeds = typed.redisUrl.split(',');
    passwordRedacted = seeds.some(hasPassword);
    words.push('--redis-url', seeds.map((seed) => (hasPassword(seed) ? redactUrl(seed.trim()) : seed)).join(','));
  }
  if (typed.cluster !== undefined) words.push(typed.cluster ? '--cluster' : '--no-cluster');
  if (typed.prefix !== undefined) words.push('--prefix', typed.prefix);
  if (typed.connectTimeout !== undefined) words.push('--connect-timeout', String(typed.connectTimeout));
  if (typed.verbose) words.push('--verbose');
  if (typed.json) words.push('--json');
  words.push(...args);
  return { text: words.map(shellQuote).join(' '), passwordRedacted };
}

function shellQuote(word: string): string {
  return PLAIN_WORD.test(word) ? word : `'${word.replace(/'/g, `'\\''`)}'`;
}

/** Mirrors `redactUrl`: a URL it cannot parse counts as one with credentials. */
function hasPassword(url: string): boolean {
  try {
    return new URL(url.trim()).password !== '';
  } catch {
    return /\/\/[^@/]*@/.test(url);
  }
}
