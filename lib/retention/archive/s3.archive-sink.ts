import { createHash } from 'node:crypto';
import type { S3Client } from '@aws-sdk/client-s3';
import { importOptionalPeer } from '../../util/optional-peer';
import { MissingPeerDependencyError } from '../../errors/missing-peer-dependency.error';
import type { ArchiveSink } from './archive-sink';

type S3Sdk = typeof import('@aws-sdk/client-s3');
/**
 * Where and how the sink writes: `retention.archive` with driver `'s3'` once
 * resolved. Declared here so that the archive needs nothing of retention
 * (retention's resolved options fit it as they are).
 */
export interface S3Options {
  bucket: string;
  prefix: string;
  region: string;
  endpoint: string | undefined;
  credentials: { accessKeyId: string; secretAccessKey: string; sessionToken?: string } | undefined;
  forcePathStyle: boolean;
}

/**
 * Archives to S3 or an S3-compatible store. `@aws-sdk/client-s3` is an
 * optional peer, loaded only when this sink is configured. Every upload sends
 * its MD5 (the store refuses a body that arrived damaged), then a HeadObject
 * checks the stored size and, when the ETag is a plain MD5, the digest.
 */
export class S3ArchiveSink implements ArchiveSink {
  readonly id: string;

  private constructor(
    private readonly sdk: S3Sdk,
    private readonly client: S3Client,
    private readonly options: S3Options,
  ) {
    this.id = `s3:${options.endpoint ?? 'aws'}/${options.bucket}/${options.prefix}`;
  }

  static async create(options: S3Options): Promise<S3ArchiveSink> {
    const sdk: S3Sdk = await importOptionalPeer(
      () => import('@aws-sdk/client-s3'),
      (error) => new MissingPeerDependencyError('@aws-sdk/client-s3', "retention.archive.driver 's3'", error),
    );
    const client = new sdk.S3Client({
      region: options.region,
      endpoint: options.endpoint,
      forcePathStyle: options.forcePathStyle,
      credentials: options.credentials,
      // The SDK's default CRC32 trailers are stored damaged by several S3-compatible stores; MD5 is sent by hand instead.
      requestChecksumCalculation: 'WHEN_REQUIRED',
      responseChecksumValidation: 'WHEN_REQUIRED',
      // A store that hangs must not hold the retention lock forever.
      requestHandler: { connectionTimeout: 5_000, requestTimeout: 60_000 },
    });
    return new S3ArchiveSink(sdk, client, options);
  }

  async put(name: string, body: Buffer): Promise<void> {
    const key = this.key(name);
    const md5 = createHash('md5').update(body).digest();
    await this.client.send(
      new this.sdk.PutObjectCommand({
        Bucket: this.options.bucket,
        Key: key,
        Body: body,
        ContentLength: body.length,
        ContentMD5: md5.toString('base64'),
        ContentType: 'application/gzip',
      }),
    );
    const head = await this.client.send(new this.sdk.HeadObjectCommand({ Bucket: this.options.bucket, Key: key }));
    if (head.ContentLength !== body.length) {
      throw new Error(`archive object ${key} has ${head.ContentLength} bytes after uploading ${body.length}`);
    }
    const etag = head.ETag?.replace(/"/g, '');
    if (etag && /^[0-9a-f]{32}$/.test(etag) && etag !== md5.toString('hex')) {
      throw new Error(`archive object ${key} has ETag ${etag}, expected the MD5 ${md5.toString('hex')}`);
    }
  }

  async list(prefix: string): Promise<string[]> {
    const names: string[] = [];
    let token: string | undefined;
    do {
      const page = await this.client.send(
        new this.sdk.ListObjectsV2Command({ Bucket: this.options.bucket, Prefix: this.key(prefix), ContinuationToken: token }),
      );
      for (const object of page.Contents ?? []) {
        if (object.Key?.endsWith('.jsonl.gz')) names.push(object.Key.slice(this.options.prefix.length));
      }
      token = page.IsTruncated ? page.NextContinuationToken : undefined;
    } while (token);
    return names;
  }

  async get(name: string): Promise<Buffer> {
    const object = await this.client.send(new this.sdk.GetObjectCommand({ Bucket: this.options.bucket, Key: this.key(name) }));
    if (!object.Body) throw new Error(`archive object ${this.key(name)} has no body`);
    return Buffer.from(await object.Body.transformToByteArray());
  }

  close(): void {
    this.client.destroy();
  }

  private key(name: string): string {
    return `${this.options.prefix}${name}`;
  }
}
