import { parseClusterEnv } from './argument.parser';
import { CliOutput } from './cli.output';
import { CliSession, type SessionOptions } from './cli.session';
import { type CommandWords, formatCommandLine, type PrintedCommand } from './command-line.format';
import type { GlobalOptions } from './global-options';
import { ProgressReporter } from './progress.reporter';

/**
 * What one command run works with: its output, the connection to the log
 * (opened on demand, so usage errors never wait for Redis) and progress bars.
 */
export class CliContext {
  readonly output: CliOutput;
  private session?: CliSession;

  constructor(
    readonly globals: GlobalOptions,
    /** The global flags typed on this command line, not defaults: repeated in commands printed for the operator. */
    private readonly typedGlobals: Partial<GlobalOptions> = {},
  ) {
    this.output = new CliOutput(globals.json === true);
  }

  /** `eventrail <command>` with this run's global flags, for a notice saying what to run next. */
  commandLine(words: CommandWords): PrintedCommand {
    return formatCommandLine(this.typedGlobals, words);
  }

  /** Connects to the log; fails when none exists at the prefix unless `createLog`. */
  async open(options: Pick<SessionOptions, 'createLog' | 'retention'> = {}): Promise<CliSession> {
    this.session ??= await CliSession.open({
      redisUrl: this.globals.redisUrl,
      cluster: this.globals.cluster ?? parseClusterEnv(process.env.EVENTRAIL_REDIS_CLUSTER),
      prefix: this.globals.prefix,
      tls: {
        ca: this.globals.tlsCa ?? envValue('EVENTRAIL_REDIS_TLS_CA'),
        cert: this.globals.tlsCert ?? envValue('EVENTRAIL_REDIS_TLS_CERT'),
        key: this.globals.tlsKey ?? envValue('EVENTRAIL_REDIS_TLS_KEY'),
      },
      connectTimeoutMs: this.globals.connectTimeout,
      verbose: this.globals.verbose === true,
      ...options,
    });
    return this.session;
  }

  progress(label: string, unit: string): ProgressReporter {
    return new ProgressReporter(label, process.stderr.isTTY === true && !this.output.json, unit);
  }

  async close(): Promise<void> {
    const session = this.session;
    this.session = undefined;
    await session?.close();
  }
}

/** An environment variable, unset when empty (`EVENTRAIL_REDIS_TLS_CA= eventrail ...` turns it off). */
function envValue(name: string): string | undefined {
  const value = process.env[name];
  return value === undefined || value === '' ? undefined : value;
}
