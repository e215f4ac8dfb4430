import { gunzipSync } from 'node:zlib';
import { ArchiveFormatError } from '../../lib';
import { archiveName, decodeArchive, encodeArchive, parseArchiveName } from '../../lib/retention/archive/archive-file';

const entries: Array<[string, string[]]> = [
  ['5-0', ['event', 'a', 'data', '{"x":1}']],
  ['5-1', ['event', 'b', 'data', '[]']],
  ['7-0', ['event', 'c', 'data', 'null']],
];

describe('archive objects: size limit and name checks', () => {
  it('writes no object bigger than restore reads, and reads none past the limit', async () => {
    const body = await encodeArchive(2, entries);
    const size = gunzipSync(body).length;
    await expect(encodeArchive(2, entries, size - 1)).rejects.toThrow('lower retention.archive.maxEntriesPerObject');
    await expect(encodeArchive(2, entries, size)).resolves.toEqual(expect.any(Buffer));

    const object = parseArchiveName(archiveName('app', 2, '5-0', '7-0'))!;
    expect(await decodeArchive(object, body, size)).toHaveLength(3);
    const error = await decodeArchive(object, body, size - 1).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ArchiveFormatError);
    expect((error as Error).message).toBe(
      `Archive "app/p2/5-0_7-0.jsonl.gz" cannot be restored: inflates past ${size - 1} bytes, the most an archive object may hold`,
    );
  });

  it('checks the entries against the name only when given the object', async () => {
    const body = await encodeArchive(2, entries);
    const wrong = parseArchiveName(archiveName('app', 2, '5-0', '6-0'))!;
    await expect(decodeArchive(wrong, body)).rejects.toThrow('line 3 cannot be restored: entry 7-0 is past 6-0');
    await expect(decodeArchive(wrong.name, body)).resolves.toHaveLength(3);
  });
});
