import { splitSeeds } from './cluster-seeds.parser';
import type { GlobalOptions } from './global-options';
import { hasPassword, redactUrl } from '../../util/redact-url';

/** A command line printed for the operator to run next (the next page of `dlq list`). */
export interface PrintedCommand {
  /** `eventrail <global flags> <command>`, each word quoted for a POSIX shell where it needs it. */
  text: string;
  /** `--redis-url` carried a password, printed as `***`: the command does not run as it stands. */
  passwordRedacted: boolean;
}

/** The words after the global flags, kept apart so that a positional argument is never read as an option. */
export interface CommandWords {
  /** `['dlq', 'list']` */
  command: readonly string[];
  /** The command's arguments, `['billing']`. */
  positionals: readonly string[];
  /** Its options with their values, `['--after', '1718000000000-0']`. */
  options: readonly string[];
}

// Words made of these need no quotes in sh, bash or zsh.
const PLAIN_WORD = /^[\w@%+=:,./-]+$/;

/**
 * `eventrail` with the global flags typed on this run and `words`. Only typed
 * flags are repeated: what came from EVENTRAIL_* variables still comes from
 * them in the same shell, and a URL from the environment keeps its password
 * off the screen. A typed URL's password is printed as `***`.
 */
export function formatCommandLine(typed: Partial<GlobalOptions>, words: CommandWords): PrintedCommand {
  const line = ['eventrail'];
  let passwordRedacted = false;
  if (typed.redisUrl !== undefined) {
    const seeds = splitSeeds(typed.redisUrl);
    passwordRedacted = seeds.some(hasPassword);
    line.push('--redis-url', seeds.map((seed) => (hasPassword(seed) ? redactUrl(seed) : seed)).join(','));
  }
  if (typed.cluster !== undefined) line.push(typed.cluster ? '--cluster' : '--no-cluster');
  if (typed.tlsCa !== undefined) line.push('--tls-ca', typed.tlsCa);
  if (typed.tlsCert !== undefined) line.push('--tls-cert', typed.tlsCert);
  if (typed.tlsKey !== undefined) line.push('--tls-key', typed.tlsKey);
  if (typed.prefix !== undefined) line.push('--prefix', typed.prefix);
  if (typed.connectTimeout !== undefined) line.push('--connect-timeout', String(typed.connectTimeout));
  if (typed.verbose) line.push('--verbose');
  if (typed.json) line.push('--json');
  line.push(...words.command, ...commandArguments(words));
  return { text: line.map(shellQuote).join(' '), passwordRedacted };
}

/**
 * Positionals first, as the help shows them; but commander reads a word that
 * starts with `-` as an option, so then the options come first and `--` ends
 * them: everything after it is positional.
 */
function commandArguments({ positionals, options }: CommandWords): string[] {
  if (!positionals.some((word) => word.startsWith('-'))) return [...positionals, ...options];
  return [...options, '--', ...positionals];
}

function shellQuote(word: string): string {
  return PLAIN_WORD.test(word) ? word : `'${word.replace(/'/g, `'\\''`)}'`;
}
