import { CommanderError } from 'commander';
import { GroupHasLiveMembersError } from '../../errors/group-has-live-members.error';
import { InvalidEventDataError } from '../../errors/invalid-event-data.error';
import { InvalidEventNameError } from '../../errors/invalid-event-name.error';
import { InvalidHeadersError } from '../../errors/invalid-headers.error';
import { InvalidOptionError } from '../../errors/invalid-option.error';
import { InvalidPublishOptionsError } from '../../errors/invalid-publish-options.error';
import { PartitionMismatchError } from '../../errors/partition-mismatch.error';
import { PayloadTooLargeError } from '../../errors/payload-too-large.error';
import { describeError } from '../../util/describe-error';
import { CliUsageError } from '../errors/cli-usage.error';

/** Exit codes of the `eventrail` command; scripts rely on them, so they never change meaning. */
export const ExitCode = {
  /** Done, including "nothing to do". */
  Ok: 0,
  /** The operation failed or was refused: Redis down, unknown group, live members, no log at the prefix. */
  Failed: 1,
  /** The command line is wrong: unknown command or option, missing or invalid argument, missing `--yes`. */
  Usage: 2,
} as const;

export type ExitCode = (typeof ExitCode)[keyof typeof ExitCode];

/** Errors about what the caller typed rather than about the log: the same command would fail again anywhere. */
const USAGE_ERRORS = [
  CliUsageError,
  CommanderError,
  InvalidOptionError,
  InvalidEventNameError,
  InvalidEventDataError,
  InvalidHeadersError,
  InvalidPublishOptionsError,
  PayloadTooLargeError,
];

export function exitCodeFor(error: unknown): ExitCode {
  return USAGE_ERRORS.some((type) => error instanceof type) ? ExitCode.Usage : ExitCode.Failed;
}

/**
 * The message printed for an error. The library's messages name its API
 * (`{ force: true }`, `partitions:`); here they name the flags instead.
 */
export function messageFor(error: unknown): string {
  if (error instanceof GroupHasLiveMembersError) {
    const { operation, group, members } = error;
    return `Refusing to ${operation} of group "${group}": it has ${members.length} live member(s) (${members.join(', ')}); pass --force to fence them`;
  }
  if (error instanceof PartitionMismatchError) {
    return `The log "${error.prefix}" has ${error.recorded} partition(s), not ${error.configured}: leave out --partitions (it only applies to a new log)`;
  }
  if (error instanceof CommanderError) return error.message.replace(/^error: /, '');
  // A cluster node answers keys of other nodes' slots with MOVED: the plain connection reached a cluster.
  if (error instanceof Error && /\bMOVED \d+ /.test(error.message))
    return `${error.message}: the server is a Redis Cluster node; pass --cluster (or EVENTRAIL_REDIS_CLUSTER=1) and seed node URLs`;
  return describeError(error);
}
