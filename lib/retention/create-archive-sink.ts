import type { ResolvedArchiveOptions } from './retention.options';
import type { ArchiveSink } from './archive/archive-sink';
import { FsArchiveSink } from './archive/fs.archive-sink';
import { S3ArchiveSink } from './archive/s3.archive-sink';

/** The sink the options describe; the S3 one loads `@aws-sdk/client-s3` here, so a missing package fails startup. */
export async function createArchiveSink(options: ResolvedArchiveOptions): Promise<ArchiveSink> {
  return options.driver === 's3' ? S3ArchiveSink.create(options) : new FsArchiveSink(options.dir);
}
