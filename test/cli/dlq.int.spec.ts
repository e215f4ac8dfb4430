import { INestApplicationContext, Injectable } from '@nestjs/common';
import { DeadLetter, EventrailAdmin, EventrailMessage, EventrailPublisher, NonRetryableError, OnEvent, PublishResult } from '../../lib';
import { testRedisUrl, uniquePrefix, waitFor } from '../support/helpers';
import {
  BIDI_SHOWN,
  cliEnv,
  escapeRegExp,
  HOSTILE,
  HOSTILE_SHOWN,
  outcome,
  parseJson,
  RAW_CONTROL,
  runCli,
  runCliStderrClosed,
  runPrinted,
  useCliSuite,
} from './cli.harness';

/** Invoices whose number is in `failing` are dead-lettered at once (with their `note` in the error); the others are recorded as handled. */
const failing = new Set<number>();
const handled: Array<{ n: number; offset: string }> = [];

@Injectable()
class Billing {
  @OnEvent('invoice.created', 'billing')
  handle(message: EventrailMessage<{ n: number; note?: string }>): void {
    const { n, note } = message.data;
    if (failing.has(n)) throw new NonRetryableError(`invoice ${n} is invalid${note === undefined ? '' : `: ${note}`}`);
    handled.push({ n: message.data.n, offset: message.offset });
  }
}

describe('eventrail CLI: dead letters', () => {
  const suite = useCliSuite('cli-dlq');
  let app: INestApplicationContext;
  let admin: EventrailAdmin;
  let published: PublishResult[];

  beforeEach(async () => {
    handled.length = 0;
    [1, 2, 3].forEach((n) => failing.add(n));
    app = await suite.start([Billing]);
    admin = app.get(EventrailAdmin);
    published = await app
      .get(EventrailPublisher)
      .publishMany([1, 2, 3].map((n) => ({ event: 'invoice.created', data: { n }, key: `customer-${n}` })));
    await waitFor(async () => (await admin.deadLetterCount('billing')) === 3, 'three dead letters');
  });
  afterEach(() => failing.clear());

  // With its stderr's reader gone, the first write there threw (an unhandled EPIPE 'error' event): the command died with
  // exit 1, a --verbose replay at its first log line, before it had replayed anything.
  it('goes on when the reader of its stderr is gone: notices are dropped, the result and the exit code stay', async () => {
    const env = cliEnv(suite.prefix);
    const letters = await admin.deadLetters('billing');
    // A page of 2 of 3 letters writes "More may follow" to stderr after the page.
    const list = await runCliStderrClosed(['dlq', 'list', 'billing', '--count', '2', '--json'], env);
    expect(list.code).toBe(0);
    expect(parseJson<Array<{ id: string }>>(list).map((l) => l.id)).toEqual(letters.slice(0, 2).map((l) => l.id));
    // A failure still says so by its exit code (its message had nowhere to go).
    const missing = await runCliStderrClosed(['dlq', 'show', 'billing', '1-0'], env);
    expect(missing.code).toBe(1);
    // --verbose logs the connection to stderr first; the replay still happens, whole.
    failing.clear();
    const replay = await runCliStderrClosed(['--verbose', 'dlq', 'replay', 'billing', '--all', '--json'], env);
    expect(replay.code).toBe(0);
    expect(parseJson(replay)).toEqual({ group: 'billing', replayed: 3 });
    await waitFor(() => handled.length === 3, 'the replayed invoices handled');
    expect(handled.map((h) => h.n).sort()).toEqual([1, 2, 3]);
  });

  // Found by helper-89: only EPIPE was dropped, so stderr on a full disk (ENOSPC) or a socket whose reader reset it still
  // killed the command with exit 1 at its first log line.
  it('goes on when stderr cannot be written at all (a full device): the result and the exit code stay', async () => {
    const env = cliEnv(suite.prefix);
    const letters = await admin.deadLetters('billing');
    const [usage, list] = await Promise.all([
      runPrinted('eventrail --bogus 2>/dev/full', env),
      runPrinted('eventrail --verbose dlq list billing --json 2>/dev/full', env),
    ]);
    expect(usage.code).toBe(2);
    expect(list.code).toBe(0);
    expect(parseJson<Array<{ id: string }>>(list).map((l) => l.id)).toEqual(letters.map((l) => l.id));
    failing.clear();
    const replay = await runPrinted('eventrail --verbose dlq replay billing --all --json 2>/dev/full', env);
    expect(replay.code).toBe(0);
    expect(parseJson(replay)).toEqual({ group: 'billing', replayed: 3 });
    await waitFor(() => handled.length === 3, 'the replayed invoices handled');
  });

  it('lists and shows dead letters as the admin service reads them', async () => {
    const env = cliEnv(suite.prefix);
    const letters = await admin.deadLetters('billing');
    const [list, newest, table, show, showTable, missing] = await Promise.all([
      runCli(['dlq', 'list', 'billing', '--json'], env),
      runCli(['dlq', 'list', 'billing', '--newest-first', '--count', '2', '--json'], env),
      runCli(['dlq', 'list', 'billing', '--count', '2'], env),
      runCli(['dlq', 'show', 'billing', letters[1].id, '--json'], env),
      runCli(['dlq', 'show', 'billing', letters[1].id], env),
      runCli(['dlq', 'show', 'billing', '1-0'], env),
    ]);
    for (const result of [list, newest, show, showTable]) expect(outcome(result)).toEqual({ code: 0, stderr: '' });

    const listed = parseJson<DeadLetter[]>(list);
    expect(listed).toEqual(JSON.parse(JSON.stringify(letters)));
    // Partitions dead-letter in parallel: the order of the three is not the publish order.
    const byNumber = [...listed].sort((a, b) => (a.data as { n: number }).n - (b.data as { n: number }).n);
    expect(byNumber.map((d) => [d.event, d.data, d.reason, d.error.message])).toEqual(
      [1, 2, 3].map((n) => ['invoice.created', { n }, 'non-retryable', `invoice ${n} is invalid`]),
    );
    expect(listed.map((d) => d.eventId).sort()).toEqual(published.map((p) => p.id).sort());
    expect(parseJson<DeadLetter[]>(newest).map((d) => d.id)).toEqual([letters[2].id, letters[1].id]);

    // A full page says how to get the next one (on stderr: stdout stays the table).
    expect(table.code).toBe(0);
    const lines = table.stdout.trimEnd().split('\n');
    expect(lines[0].split(/\s{2,}/)).toEqual(['ID', 'EVENT', 'KEY', 'PARTITION', 'REASON', 'ATTEMPTS', 'FAILED AT', 'ERROR']);
    expect(lines.slice(1).map((line) => line.split(/\s+/)[0])).toEqual([letters[0].id, letters[1].id]);
    expect(table.stderr).toContain(`--after ${letters[1].id}`);

    expect(parseJson(show)).toEqual(JSON.parse(JSON.stringify(letters[1])));
    expect(showTable.stdout).toMatch(new RegExp(`^Dead letter:\\s+${letters[1].id}$`, 'm'));
    expect(showTable.stdout).toContain(`Data:\n  {\n    "n": ${(letters[1].data as { n: number }).n}\n  }`);
    expect(outcome(missing)).toEqual({
      code: 1,
      stderr: 'eventrail: No dead letter 1-0 in group "billing" (already replayed or purged?)\n',
    });
  });

  it('prints a next-page command that repeats every flag, global ones included, and lists exactly the next page', async () => {
    [4, 5].forEach((n) => failing.add(n));
    await app.get(EventrailPublisher).publishMany([4, 5].map((n) => ({ event: 'invoice.created', data: { n }, key: `customer-${n}` })));
    await waitFor(async () => (await admin.deadLetterCount('billing')) === 5, 'five dead letters');
    const newestFirst = (await admin.deadLetters('billing', { newestFirst: true })).map((d) => d.id);

    // Neither the log nor Redis is where the environment points: the printed command must carry --prefix and --redis-url.
    const env = cliEnv(uniquePrefix('cli-dlq-elsewhere'), { EVENTRAIL_REDIS_URL: 'redis://127.0.0.1:1' });
    // The default user of a Redis without ACLs takes any password: enough to see it redacted, then put back.
    const url = new URL(testRedisUrl());
    url.username = 'default';
    url.password = 'secret';
    let result = await runCli(
      [
        '--redis-url',
        url.toString(),
        '--connect-timeout',
        '4000',
        'dlq',
        'list',
        'billing',
        '--prefix',
        suite.prefix,
        '--newest-first',
        '--count',
        '2',
      ],
      env,
    );
    const pages: string[][] = [];
    const printed: string[] = [];
    for (;;) {
      expect(result.code).toBe(0);
      pages.push(
        result.stdout
          .trimEnd()
          .split('\n')
          .slice(1)
          .map((line) => line.split(/\s+/)[0]),
      );
      const hint = /^More may follow: (eventrail .+?)( \(put the password back[^)]*\))?$/m.exec(result.stderr);
      if (hint === null) break;
      expect(hint[2]).toBeDefined();
      printed.push(hint[1]);
      result = await runPrinted(hint[1].replace('***', 'secret'), env);
    }
    expect(pages).toEqual([newestFirst.slice(0, 2), newestFirst.slice(2, 4), newestFirst.slice(4)]);
    const redacted = `'${url.toString().replace('secret', '***')}'`;
    expect(printed).toEqual(
      [newestFirst[1], newestFirst[3]].map(
        (after) =>
          `eventrail --redis-url ${redacted} --prefix ${suite.prefix} --connect-timeout 4000 dlq list billing --newest-first --count 2 --after ${after}`,
      ),
    );
    expect(printed.join('\n')).not.toContain('secret');
  });

  it('escapes control characters from a dead letter in human output, and keeps them intact in --json', async () => {
    failing.add(9);
    await app
      .get(EventrailPublisher)
      .publish('invoice.created', { n: 9, note: HOSTILE }, { key: `k-${HOSTILE}`, headers: { trace: HOSTILE } });
    await waitFor(async () => (await admin.deadLetterCount('billing')) === 4, 'the hostile dead letter');
    const letter = (await admin.deadLetters('billing')).find((d) => (d.data as { n: number }).n === 9) as DeadLetter;

    const env = cliEnv(suite.prefix);
    const [table, tableJson, show, showJson] = await Promise.all([
      runCli(['dlq', 'list', 'billing'], env),
      runCli(['dlq', 'list', 'billing', '--json'], env),
      runCli(['dlq', 'show', 'billing', letter.id], env),
      runCli(['dlq', 'show', 'billing', letter.id, '--json'], env),
    ]);
    for (const result of [table, tableJson, show, showJson]) {
      expect(outcome(result)).toEqual({ code: 0, stderr: '' });
      expect(result.stdout).not.toMatch(RAW_CONTROL);
    }

    // One row per dead letter (the forged line stays in its cell), the key shown escaped, the columns still aligned.
    const rows = table.stdout.trimEnd().split('\n');
    expect(rows).toHaveLength(5);
    const row = rows.find((line) => line.startsWith(letter.id)) as string;
    expect(row).toContain(`k-${HOSTILE_SHOWN}`);
    expect(row).toContain('NonRetryableError: invoice 9 is invalid: \\x1b]0;pwned');
    expect(row.indexOf('non-retryable')).toBe(rows[0].indexOf('REASON'));

    expect(show.stdout).toMatch(new RegExp(`^Key:\\s+k-${escapeRegExp(HOSTILE_SHOWN)}$`, 'm'));
    expect(show.stdout).toMatch(new RegExp(`^Error:\\s+NonRetryableError: invoice 9 is invalid: ${escapeRegExp(HOSTILE_SHOWN)}$`, 'm'));
    // Data and headers are JSON: C0 escaped by JSON, the rest by the CLI.
    const inJson = `\\u001b]0;pwned\\u0007\\u001b[2J\\u009b31m\\r\\nforged\\x7f${BIDI_SHOWN}`;
    expect(show.stdout).toContain(`"note": "${inJson}"`);
    expect(show.stdout).toContain(`"trace": "${inJson}"`);
    // The stack keeps its line breaks, escaping the rest.
    expect(show.stdout).toContain(
      `Stack:\n  NonRetryableError: invoice 9 is invalid: \\x1b]0;pwned\\x07\\x1b[2J\\u009b31m\\r\n  forged\\x7f${BIDI_SHOWN}\n`,
    );

    const listed = parseJson<DeadLetter[]>(tableJson).find((d) => d.id === letter.id) as DeadLetter;
    for (const intact of [listed, parseJson<DeadLetter>(showJson)]) {
      expect(intact).toEqual(JSON.parse(JSON.stringify(letter)));
      expect(intact).toMatchObject({ key: `k-${HOSTILE}`, data: { note: HOSTILE }, headers: { trace: HOSTILE } });
      expect(intact.error.message).toBe(`invoice 9 is invalid: ${HOSTILE}`);
    }
  });

  it('replays chosen dead letters, then all of them, to the group that handles them again', async () => {
    failing.clear();
    const env = cliEnv(suite.prefix);
    const letters = await admin.deadLetters('billing');
    const target = letters.find((d) => (d.data as { n: number }).n === 2) as DeadLetter;

    // One unknown id among known ones: nothing is replayed.
    const partly = await runCli(['dlq', 'replay', 'billing', target.id, '1-0'], env);
    expect(outcome(partly)).toEqual({ code: 1, stderr: expect.stringContaining('No dead letter 1-0') });
    expect(await admin.deadLetterCount('billing')).toBe(3);

    const one = await runCli(['dlq', 'replay', 'billing', target.id], env);
    expect(outcome(one)).toEqual({ code: 0, stderr: '' });
    expect(one.stdout).toBe('Replayed 1 dead letter(s) to group "billing".\n');
    await waitFor(() => handled.length === 1, 'replayed invoice handled');
    expect(handled[0].n).toBe(2);
    expect(await admin.deadLetter('billing', target.id)).toBeNull();

    const all = await runCli(['dlq', 'replay', 'billing', '--all', '--json'], env);
    expect(outcome(all)).toEqual({ code: 0, stderr: '' });
    expect(parseJson(all)).toEqual({ group: 'billing', replayed: 2 });
    await waitFor(
      () => handled.length === 3,
      () => `handled ${JSON.stringify(handled)}`,
    );
    expect(handled.map((h) => h.n).sort()).toEqual([1, 2, 3]);
    // Appended anew, after the originals.
    expect(handled.every((h) => !published.some((p) => p.offset === h.offset))).toBe(true);
    expect(await admin.deadLetterCount('billing')).toBe(0);

    const nothing = await runCli(['dlq', 'replay', 'billing', '--all'], env);
    expect(outcome(nothing)).toEqual({ code: 0, stderr: '' });
    expect(nothing.stdout).toBe('No dead letters to replay in group "billing".\n');
  });

  it('purges only with --yes, and an empty DLQ is nothing to do', async () => {
    const env = cliEnv(suite.prefix);
    const refused = await runCli(['dlq', 'purge', 'billing'], env);
    expect(outcome(refused)).toEqual({ code: 2, stderr: expect.stringContaining('pass --yes') });
    expect(await admin.deadLetterCount('billing')).toBe(3);

    const purged = await runCli(['dlq', 'purge', 'billing', '--yes', '--json'], env);
    expect(outcome(purged)).toEqual({ code: 0, stderr: '' });
    expect(parseJson(purged)).toEqual({ group: 'billing', purged: 3 });
    expect(await admin.deadLetterCount('billing')).toBe(0);

    const [again, unknown] = await Promise.all([
      runCli(['dlq', 'purge', 'billing', '-y'], env),
      runCli(['dlq', 'purge', 'nope', '--yes'], env),
    ]);
    expect(outcome(again)).toEqual({ code: 0, stderr: '' });
    expect(again.stdout).toBe('No dead letters in group "billing".\n');
    expect(outcome(unknown)).toEqual({ code: 1, stderr: expect.stringContaining('Unknown consumer group "nope"') });
  });
});
