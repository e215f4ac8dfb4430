import { randomBytes } from 'node:crypto';
import { mkdir, open, readdir, readFile, rename, rm, stat } from 'node:fs/promises';
import { dirname, join, resolve, sep } from 'node:path';
import type { ArchiveSink } from './archive-sink';

/**
 * Archives to a directory. Each object is written to a temporary file, flushed
 * to disk, renamed into place (atomic on one file system, so a reader never
 * sees half an archive), its directory flushed (so a crash cannot undo the
 * rename, or the creation of a new directory, after the mark has moved) and its
 * size checked.
 */
export class FsArchiveSink implements ArchiveSink {
  readonly id: string;
  private readonly root: string;

  constructor(dir: string) {
    this.root = resolve(dir);
    this.id = `fs:${this.root}`;
  }

  async put(name: string, body: Buffer): Promise<void> {
    const path = this.path(name);
    const created = await mkdir(dirname(path), { recursive: true });
    const temporary = `${path}.${randomBytes(6).toString('hex')}.tmp`;
    try {
      const handle = await open(temporary, 'wx');
      try {
        await handle.writeFile(body);
        await handle.sync();
      } finally {
        await handle.close();
      }
      await rename(temporary, path);
    } catch (error) {
      await rm(temporary, { force: true });
      throw error;
    }
    // A rename is durable once its directory is; directories mkdir just made are entries in their parents.
    for (const dir of directoriesToSync(dirname(path), created)) await syncDirectory(dir);
    const { size } = await stat(path);
    if (size !== body.length) throw new Error(`archive file ${path} has ${size} bytes after writing ${body.length}`);
  }

  async list(prefix: string): Promise<string[]> {
    const names: string[] = [];
    const walk = async (relative: string): Promise<void> => {
      let entries;
      try {
        entries = await readdir(this.path(relative), { withFileTypes: true });
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code === 'ENOENT') return;
        throw error;
      }
      for (const entry of entries) {
        const child = relative === '' ? entry.name : `${relative}/${entry.name}`;
        if (entry.isDirectory()) await walk(child);
        else if (entry.isFile() && entry.name.endsWith('.jsonl.gz')) names.push(child);
      }
    };
    await walk(prefix.replace(/\/+$/, ''));
    return names;
  }

  get(name: string): Promise<Buffer> {
    return readFile(this.path(name));
  }

  close(): void {}

  private path(name: string): string {
    const path = resolve(join(this.root, ...name.split('/')));
    if (path !== this.root && !path.startsWith(this.root + sep)) throw new Error(`archive name ${name} leaves the archive directory`);
    return path;
  }
}

/** The file's directory, and when `mkdir` created directories (from `created` down), every parent of one. */
function directoriesToSync(dir: string, created: string | undefined): string[] {
  const dirs = [dir];
  if (created === undefined) return dirs;
  for (let parent = dirname(dir); ; parent = dirname(parent)) {
    dirs.push(parent);
    if (parent === dirname(created) || parent === dirname(parent)) return dirs;
  }
}

async function syncDirectory(dir: string): Promise<void> {
  let handle;
  try {
    handle = await open(dir, 'r');
  } catch (error) {
    // Windows cannot open a directory; its file system orders a rename's metadata itself.
    if (process.platform === 'win32' && ['EISDIR', 'EPERM', 'EACCES'].includes(String((error as NodeJS.ErrnoException).code))) return;
    throw error;
  }
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}
