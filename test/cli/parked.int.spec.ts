import { INestApplicationContext, Injectable } from '@nestjs/common';
import { EventrailAdmin, EventrailMessage, EventrailPublisher, OnEvent, ParkedKey, PublishResult } from '../../lib';
import { waitFor } from '../support/helpers';
import { cliEnv, HOSTILE, HOSTILE_SHOWN, outcome, parseJson, RAW_CONTROL, runCli, useCliSuite } from './cli.harness';

type Data = { key: string; n: number };

/** Keys in `down` fail; every success is recorded as `<key><n>`. */
const dependency = { down: new Set<string>(), handled: [] as string[] };

/**
 * After one quick tier (maxRetries 1, 5 ms), parked heads wait ten minutes for their next tier: only the
 * operator's retry or give-up moves them within a test, so what the CLI asked for is what happened.
 */
@Injectable()
class Payments {
  @OnEvent('account.changed', {
    group: 'payments',
    ordering: 'key',
    maxRetries: 1,
    retryBackoffMs: 5,
    retryBackoffMaxMs: 10,
    redelivery: { delayMs: 600_000, maxDelayMs: 600_000, maxAgeMs: 3_600_000 },
  })
  handle(message: EventrailMessage<Data>): void {
    if (dependency.down.has(message.data.key)) throw new Error(`${message.data.key} is down`);
    dependency.handled.push(`${message.data.key}${message.data.n}`);
  }
}

describe('eventrail CLI: parked keys', () => {
  const suite = useCliSuite('cli-parked');
  let app: INestApplicationContext;
  let admin: EventrailAdmin;
  let published: PublishResult[];
  const handledOf = (key: string): string[] => dependency.handled.filter((name) => name.startsWith(key));

  beforeEach(async () => {
    dependency.down = new Set(['A', 'B']);
    dependency.handled = [];
    app = await suite.start([Payments], 1);
    admin = app.get(EventrailAdmin);
    published = await app
      .get(EventrailPublisher)
      .publishMany(
        ['A1', 'A2', 'B1', 'C1'].map((name) => ({ event: 'account.changed', data: { key: name[0], n: Number(name[1]) }, key: name[0] })),
      );
    await waitFor(async () => {
      const parked = await admin.parkedKeys('payments');
      // The quick tier (maxRetries 1) spent: from here on only the ten-minute tier is left.
      return parked.length === 2 && parked.every((line) => line.attempts === 2) && handledOf('C').length === 1;
    }, 'A and B parked past their quick tier, C handled');
  });

  it('lists parked keys as the admin service reads them, as JSON and as a table', async () => {
    const env = cliEnv(suite.prefix);
    const parked = await admin.parkedKeys('payments');
    const [json, table, unknown] = await Promise.all([
      runCli(['parked', 'list', 'payments', '--json'], env),
      runCli(['parked', 'list', 'payments'], env),
      runCli(['parked', 'list', 'nope'], env),
    ]);
    expect(outcome(json)).toEqual({ code: 0, stderr: '' });
    expect(outcome(table)).toEqual({ code: 0, stderr: '' });
    expect(parseJson<ParkedKey[]>(json)).toEqual(JSON.parse(JSON.stringify(parked)));
    expect(parseJson<ParkedKey[]>(json).map((p) => [p.key, p.offset, p.eventId, p.count, p.attempts])).toEqual([
      ['A', published[0].offset, published[0].id, 2, 2],
      ['B', published[2].offset, published[2].id, 1, 2],
    ]);

    const lines = table.stdout.trimEnd().split('\n');
    expect(lines[0].split(/\s{2,}/)).toEqual([
      'KEY',
      'PARTITION',
      'HEAD',
      'EVENT',
      'WAITING',
      'ATTEMPTS',
      'FIRST FAILED',
      'NEXT ATTEMPT',
      'ERROR',
    ]);
    expect(lines.slice(1).map((line) => line.split(/\s+/))).toEqual([
      [
        'A',
        '0',
        published[0].offset,
        'account.changed',
        '2',
        '2',
        parked[0].firstFailedAt?.toISOString(),
        parked[0].nextAttemptAt.toISOString(),
        'Error:',
        'A',
        'is',
        'down',
      ],
      [
        'B',
        '0',
        published[2].offset,
        'account.changed',
        '1',
        '2',
        parked[1].firstFailedAt?.toISOString(),
        parked[1].nextAttemptAt.toISOString(),
        'Error:',
        'B',
        'is',
        'down',
      ],
    ]);
    expect(outcome(unknown)).toEqual({ code: 1, stderr: expect.stringContaining('Unknown consumer group "nope"') });
  });

  it('shows a hostile key escaped and the keyless line as such, gives up the keyless head, and an empty list as nothing parked', async () => {
    dependency.down = new Set([HOSTILE[0], '']);
    const publisher = app.get(EventrailPublisher);
    await publisher.publish('account.changed', { key: HOSTILE[0], n: 1 }, { key: HOSTILE });
    const [keyless] = await publisher.publishMany([{ event: 'account.changed', data: { key: '', n: 1 } }]);
    await waitFor(async () => (await admin.parkedKeys('payments')).length === 4, 'the hostile key and the keyless line parked');
    const env = cliEnv(suite.prefix);
    const table = await runCli(['parked', 'list', 'payments'], env);
    expect(outcome(table)).toEqual({ code: 0, stderr: '' });
    // A key is shown whole, escaped: a cut or a merged line could make two keys read as one.
    expect(table.stdout).toContain(`\n${HOSTILE_SHOWN}   `);
    expect(table.stdout).toMatch(new RegExp(`\\n\\(keyless\\)\\s+0\\s+${keyless.offset}\\s`));
    expect(table.stdout.replace(/\n/g, '')).not.toMatch(RAW_CONTROL);

    const given = await runCli(['parked', 'give-up', 'payments', '--key', '', '--yes', '--json'], env);
    expect(outcome(given)).toEqual({ code: 0, stderr: '' });
    expect(parseJson(given)).toEqual({ group: 'payments', key: '', head: keyless.offset, eventId: keyless.id, partitions: 1 });
    await waitFor(
      async () => (await admin.deadLetters('payments')).some((d) => d.eventId === keyless.id),
      'the keyless head dead-lettered',
    );
    await waitFor(async () => !(await admin.parkedKeys('payments')).some((p) => p.key === ''), 'the keyless line released');

    // Every key back: retried all at once, the lines are released and the list is empty.
    dependency.down.clear();
    const retried = await runCli(['parked', 'retry', 'payments', '--json'], env);
    expect(outcome(retried)).toEqual({ code: 0, stderr: '' });
    expect(parseJson(retried)).toEqual({ group: 'payments', key: null, keys: 3, partitions: 1 });
    await waitFor(async () => (await admin.parkedKeys('payments')).length === 0, 'every line released');
    expect(handledOf('A')).toEqual(['A1', 'A2']);
    const [empty, nothing] = await Promise.all([runCli(['parked', 'list', 'payments'], env), runCli(['parked', 'retry', 'payments'], env)]);
    expect(outcome(empty)).toEqual({ code: 0, stderr: '' });
    expect(empty.stdout).toBe('No parked keys in group "payments".\n');
    expect(outcome(nothing)).toEqual({ code: 0, stderr: '' });
    expect(nothing.stdout).toBe('No parked keys in group "payments".\n');
  });

  it('retries one key now, and refuses a key that is not parked', async () => {
    const env = cliEnv(suite.prefix);
    dependency.down.delete('B');
    const [retried, missing] = await Promise.all([
      runCli(['parked', 'retry', 'payments', '--key', 'B'], env),
      runCli(['parked', 'retry', 'payments', '--key', 'C'], env),
    ]);
    expect(outcome(retried)).toEqual({ code: 0, stderr: '' });
    expect(retried.stdout).toBe('Retrying key "B" of group "payments" now.\n');
    // Ten minutes before its next tier: handled now only because of the retry.
    await waitFor(() => handledOf('B').length === 1, 'B1 handled after the retry');
    await waitFor(async () => (await admin.parkedKeys('payments')).map((p) => p.key).join() === 'A', "only A's line left");
    expect(outcome(missing)).toEqual({
      code: 1,
      stderr: 'eventrail: No parked line of key "C" in group "payments" (released, given up, or never parked?)\n',
    });
    expect(handledOf('A')).toEqual([]);
  });

  it('gives a head up only with --yes and a --key: the head is dead-lettered and the next message of the key goes', async () => {
    const env = cliEnv(suite.prefix);
    dependency.down.delete('A');
    const [refused, noKey] = await Promise.all([
      runCli(['parked', 'give-up', 'payments', '--key', 'A'], env),
      runCli(['parked', 'give-up', 'payments', '--yes'], env),
    ]);
    expect(outcome(refused)).toEqual({ code: 2, stderr: expect.stringContaining('pass --yes') });
    expect(outcome(noKey)).toEqual({ code: 2, stderr: expect.stringContaining("required option '--key <key>' not specified") });
    expect((await admin.parkedKeys('payments')).map((p) => [p.key, p.count])).toEqual([
      ['A', 2],
      ['B', 1],
    ]);
    expect(await admin.deadLetterCount('payments')).toBe(0);

    const given = await runCli(['parked', 'give-up', 'payments', '--key', 'A', '--yes', '--json'], env);
    expect(outcome(given)).toEqual({ code: 0, stderr: '' });
    expect(parseJson(given)).toEqual({ group: 'payments', key: 'A', head: published[0].offset, eventId: published[0].id, partitions: 1 });
    await waitFor(() => handledOf('A').length === 1, 'A2 handled after the give-up');
    expect(handledOf('A')).toEqual(['A2']);
    const [letter] = await admin.deadLetters('payments');
    expect(letter).toMatchObject({ eventId: published[0].id, reason: 'retries-exhausted' });
    expect(letter.error.message).toMatch(/given up by an operator.*A is down/);
    await waitFor(async () => (await admin.parkedKeys('payments')).map((p) => p.key).join() === 'B', "only B's line left");

    const again = await runCli(['parked', 'give-up', 'payments', '--key', 'A', '-y'], env);
    expect(outcome(again)).toEqual({
      code: 1,
      stderr: 'eventrail: No parked line of key "A" in group "payments" (released, given up, or never parked?)\n',
    });
    const human = await runCli(['parked', 'give-up', 'payments', '--key', 'B', '-y'], env);
    expect(outcome(human)).toEqual({ code: 0, stderr: '' });
    expect(human.stdout).toBe(
      `Giving up ${published[2].offset} (event ${published[2].id}), the head of key "B" in group "payments": ` +
        "it is dead-lettered and the key's next message is tried at once.\n",
    );
    await waitFor(async () => (await admin.deadLetterCount('payments')) === 2, 'B1 dead-lettered');
    expect(await admin.parkedKeys('payments')).toEqual([]);
  });
});
