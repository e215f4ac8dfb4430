import { INestApplicationContext } from '@nestjs/common';
import Redis from 'ioredis';
import { randomUUID } from 'node:crypto';
import { EventrailAdmin, InvalidDeadLetterError } from '../../lib';
import { EventrailKeys } from '../../lib/redis/keys';
import { assertBuilt, cliEnv, runCli } from '../cli/cli.harness';
import { createApp } from '../support/app';
import { deletePrefix, testRedisUrl, uniquePrefix } from '../support/helpers';

/**
 * Dead letters whose stored fields eventrail did not write (edited by hand): a replay names the letter with
 * `InvalidDeadLetterError` before it claims or appends anything of its page, instead of a bare `SyntaxError`
 * after the page's claims were taken (which held those letters for a minute). Found by helper-85.
 */
describe('a replay meets a dead letter edited by hand', () => {
  let redis: Redis;
  let prefix: string;
  let keys: EventrailKeys;
  let app: INestApplicationContext | undefined;

  beforeAll(() => {
    redis = new Redis(testRedisUrl());
  });
  beforeEach(async () => {
    prefix = uniquePrefix('edited');
    keys = new EventrailKeys(prefix, 2);
    app = await createApp({ prefix, partitions: 2 }, []);
    await redis.sadd(keys.groups, 'billing');
  });
  afterEach(async () => {
    await app?.close();
    await deletePrefix(redis, prefix);
  });
  afterAll(() => redis.disconnect());

  /**
   * A dead letter's fields as a sink writes them for a well-formed, keyless entry (its original fields, then the
   * failure), with `changes` applied: a value replaces the field's, undefined leaves the field out.
   */
  const letterFields = (changes: Record<string, string | undefined> = {}): string[] => {
    const fields: Record<string, string | undefined> = {
      id: randomUUID(),
      event: 'order.placed',
      data: '{}',
      group: 'billing',
      partition: '0',
      offset: '1-0',
      reason: 'retries-exhausted',
      errorName: 'Error',
      errorMessage: 'boom',
      attempts: '1',
      ...changes,
    };
    return Object.entries(fields).flatMap(([name, value]) => (value === undefined ? [] : [name, value]));
  };
  const addLetter = (changes?: Record<string, string | undefined>): Promise<string> =>
    redis.xadd(keys.deadLetters('billing'), '*', ...letterFields(changes)) as Promise<string>;
  const goodLetter = (n: number): Promise<string> => addLetter({ data: JSON.stringify({ n }), key: `k${n}`, offset: `${n + 1}-0` });
  /** A dead letter of a malformed entry, its `raw` field (the entry's fields as JSON) replaced by `raw`. */
  const editedLetter = (raw: string): Promise<string> =>
    addLetter({ id: undefined, event: undefined, data: undefined, raw, partition: '1', offset: '9-0', reason: 'malformed' });
  /** Claims held on letters still dead (a replayed letter's claim is left to expire, by design). */
  const claimsLeft = async (): Promise<number> => {
    const ids = (await redis.xrange(keys.deadLetters('billing'), '-', '+')).map(([id]) => id);
    return ids.length === 0 ? 0 : redis.exists(...ids.map((id) => keys.replayClaim('billing', id)));
  };
  /** What `replayDeadLetters('billing', 'all')` rejects with (or resolves to, where a test expects a refusal). */
  const refusedReplay = (): Promise<unknown> =>
    (app as INestApplicationContext)
      .get(EventrailAdmin)
      .replayDeadLetters('billing', 'all')
      .catch((error: unknown) => error);
  const logLength = async (): Promise<number> => (await redis.xlen(keys.stream(0))) + (await redis.xlen(keys.stream(1)));

  // Anything a hand could put there: not JSON, JSON of the wrong shape, an array holding something else than strings.
  // (Each with an offset: a letter without a valid one is refused as well, below.)
  const EDITED = [
    'not json',
    '',
    '{"a":1}',
    '"event"',
    'null',
    '42',
    '[1,2]',
    '["event",null]',
    '[["a"]]',
    '[{"event":"x"}]',
    '["a",true]',
    '[',
    // Found by helper-86: arrays of strings that are no entry's fields (none, or a name without its value).
    '[]',
    '["event"]',
    '["event","e","data"]',
    '\u0000',
  ];

  it.each(EDITED)(
    'raw %j: InvalidDeadLetterError naming the letter; nothing of its page claimed or appended; the others replay by id',
    async (raw) => {
      const before = await goodLetter(1);
      const edited = await editedLetter(raw);
      const after = await goodLetter(2);
      const admin = (app as INestApplicationContext).get(EventrailAdmin);

      const refused = await refusedReplay();
      expect(refused).toBeInstanceOf(InvalidDeadLetterError);
      expect(refused).toMatchObject({ group: 'billing', id: edited, done: 0, reason: expect.stringMatching(/field "raw"/) });
      expect((refused as Error).message).toContain(`Dead letter ${edited} of group "billing" cannot be replayed`);
      expect([await redis.xlen(keys.deadLetters('billing')), await logLength(), await claimsLeft()]).toEqual([3, 0, 0]);

      // Nothing waits on a claim: the others replay at once, by id.
      await expect(admin.replayDeadLetters('billing', [before, after])).resolves.toBe(2);
      expect([await redis.xlen(keys.deadLetters('billing')), await logLength()]).toEqual([1, 2]);
    },
  );

  it.each([undefined, '', 'x', '12', '1-0-0'])(
    'a letter with offset %j: InvalidDeadLetterError, nothing claimed or appended',
    async (offset) => {
      const edited = await addLetter({ offset });
      await goodLetter(1);
      const refused = await refusedReplay();
      expect(refused).toBeInstanceOf(InvalidDeadLetterError);
      expect(refused).toMatchObject({ id: edited, done: 0, reason: expect.stringMatching(/field "offset"/) });
      expect([await redis.xlen(keys.deadLetters('billing')), await logLength(), await claimsLeft()]).toEqual([2, 0, 0]);
    },
  );

  // Found by helper-86 (none of the fields) and helper-88 (some): a letter without `raw` whose entry fields make no
  // entry was appended as it was, and a consumer dead-lettered it again as malformed. eventrail writes such a letter
  // with `raw`.
  it.each<[string, Record<string, string | undefined>]>([
    ['none of the entry fields', { id: undefined, event: undefined, data: undefined }],
    ['only a key', { id: undefined, event: undefined, data: undefined, key: 'k1' }],
    ['an event without data', { data: undefined }],
    ['data without an event', { event: undefined }],
    ['only id, time and headers', { event: undefined, data: undefined, time: '1700000000000', headers: '{}' }],
  ])('a letter without raw and with %s: InvalidDeadLetterError, nothing claimed or appended', async (_, changes) => {
    const edited = await addLetter(changes);
    await goodLetter(1);
    const refused = await refusedReplay();
    expect(refused).toBeInstanceOf(InvalidDeadLetterError);
    expect(refused).toMatchObject({
      id: edited,
      done: 0,
      reason: expect.stringMatching(/no field "raw" and its entry's fields are not an entry's/),
    });
    expect([await redis.xlen(keys.deadLetters('billing')), await logLength(), await claimsLeft()]).toEqual([2, 0, 0]);
  });

  // Found by helper-86: a keyless letter whose partition field names no stream ("1.5": keys.stream(1.5) is undefined)
  // was appended to the key "" and deleted from the dead-letter stream, lost to every consumer.
  it.each(['1.5', '0.5', 'NaN', '-1', '2', '1e0', ''])(
    "a keyless letter with partition %j is replayed into one of the log's partitions",
    async (partition) => {
      const letter = await addLetter({ partition, offset: '5-0' });
      await expect((app as INestApplicationContext).get(EventrailAdmin).replayDeadLetters('billing', [letter])).resolves.toBe(1);
      expect([await redis.xlen(keys.deadLetters('billing')), await logLength(), await redis.exists('')]).toEqual([0, 1, 0]);
    },
  );

  it('CLI: eventrail dlq replay --all exits 1 naming the letter', async () => {
    assertBuilt();
    const edited = await editedLetter('not json');
    const replay = await runCli(['dlq', 'replay', 'billing', '--all'], cliEnv(prefix));
    expect(replay.code).toBe(1);
    expect(replay.stderr).toContain(`Dead letter ${edited} of group "billing" cannot be replayed: its field "raw" is not valid JSON`);
    expect(await redis.xlen(keys.deadLetters('billing'))).toBe(1);
  });

  it('counts the pages replayed before the edited letter in done', async () => {
    const pipeline = redis.pipeline();
    for (let n = 0; n < 600; n++) pipeline.xadd(keys.deadLetters('billing'), '*', ...letterFields({ offset: `${n + 1}-0` }));
    await pipeline.exec();
    const edited = await editedLetter('not json');
    const refused = await refusedReplay();
    // Pages of 500: the first went through; the second, which holds the edited letter, claimed nothing.
    expect(refused).toMatchObject({ id: edited, done: 500 });
    expect([await redis.xlen(keys.deadLetters('billing')), await logLength(), await claimsLeft()]).toEqual([101, 500, 0]);
  });
});
