/** The global flags, as commander parses them. */
export interface GlobalOptions {
  redisUrl?: string;
  /** `--cluster` true, `--no-cluster` false, neither undefined (then `EVENTRAIL_REDIS_CLUSTER` decides). */
  cluster?: boolean;
  prefix?: string;
  tlsCa?: string;
  tlsCert?: string;
  tlsKey?: string;
  json?: boolean;
  verbose?: boolean;
  connectTimeout: number;
}
