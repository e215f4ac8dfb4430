import type { FileHandle } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { FsArchiveSink } from '../../lib/retention/archive/fs.archive-sink';

// The module object itself (not an import-star copy), so the spies see the sink's calls.
const fs = jest.requireActual<typeof import('node:fs/promises')>('node:fs/promises');

describe('FsArchiveSink durability', () => {
  let root: string;
  let calls: string[];

  beforeEach(async () => {
    root = await fs.mkdtemp(join(tmpdir(), 'eventrail-fs-sink-'));
    calls = [];
    // Spies on the file system calls themselves, to see what is flushed and when.
    const paths = new WeakMap<FileHandle, string>();
    const open = fs.open;
    jest.spyOn(fs, 'open').mockImplementation(async (...args: Parameters<typeof fs.open>) => {
      const handle = await open(...args);
      paths.set(handle, String(args[0]));
      return handle;
    });
    const probe = await open(root, 'r');
    const prototype = Object.getPrototypeOf(probe) as FileHandle;
    await probe.close();
    const sync = prototype.sync;
    jest.spyOn(prototype, 'sync').mockImplementation(function (this: FileHandle) {
      calls.push(`sync ${paths.get(this)}`);
      return sync.call(this);
    });
    const rename = fs.rename;
    jest.spyOn(fs, 'rename').mockImplementation((from, to) => {
      calls.push(`rename ${String(to)}`);
      return rename(from, to);
    });
  });

  afterEach(async () => {
    jest.restoreAllMocks();
    await fs.rm(root, { recursive: true, force: true });
  });

  it('flushes the directory after the rename, and the parents of directories it created', async () => {
    const sink = new FsArchiveSink(join(root, 'archive'));
    const name = 'app/p0/1-0_2-0.jsonl.gz';
    const file = join(root, 'archive', 'app', 'p0', '1-0_2-0.jsonl.gz');
    await sink.put(name, Buffer.from('first'));

    const renamed = calls.indexOf(`rename ${file}`);
    expect(renamed).toBeGreaterThan(0);
    expect(calls[renamed - 1]).toMatch(/^sync .*\.tmp$/); // the content, before the rename
    // After it: the directory of the file, then each directory that holds one mkdir created (archive, app, p0).
    expect(calls.slice(renamed + 1)).toEqual([
      `sync ${dirname(file)}`,
      `sync ${join(root, 'archive', 'app')}`,
      `sync ${join(root, 'archive')}`,
      `sync ${root}`,
    ]);

    calls.length = 0;
    await sink.put('app/p0/3-0_4-0.jsonl.gz', Buffer.from('second'));
    // Nothing new created: only the file's directory.
    expect(calls.slice(calls.findIndex((c) => c.startsWith('rename ')) + 1)).toEqual([`sync ${dirname(file)}`]);
    expect(await fs.readFile(join(dirname(file), '3-0_4-0.jsonl.gz'), 'utf8')).toBe('second');
  });
});
