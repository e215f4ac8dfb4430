import { NotFoundException } from '@nestjs/common';
import { readFileSync, readdirSync } from 'node:fs';
import { extname, join } from 'node:path';

const TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
};
const BASE_PLACEHOLDER = '__EVENTRAIL_BASE__';

export interface Asset {
  body: Buffer;
  type: string;
}

/**
 * The UI's files, shipped built in `ui/` beside this file (no build step for
 * the user) and read once. Only files found there are served, by exact name.
 */
export class DashboardAssets {
  private readonly files = new Map<string, Asset>();
  private readonly index: string;
  private readonly pages = new Map<string, Asset>();

  constructor(directory = join(__dirname, 'ui')) {
    for (const name of readdirSync(directory)) {
      const type = TYPES[extname(name)];
      if (type && name !== 'index.html') this.files.set(name, { body: readFileSync(join(directory, name)), type });
    }
    this.index = readFileSync(join(directory, 'index.html'), 'utf8');
  }

  /**
   * The page, with `<base href>` set to `<mountedPath>/`, so that its relative asset and API URLs work
   * under any mount path and global prefix. Built once: the base never depends on a request.
   */
  page(mountedPath: string): Asset {
    let page = this.pages.get(mountedPath);
    if (!page) {
      // A replacer function, not a string: `$&`, `$'` and the like in a string replacement are patterns.
      const html = this.index.replace(BASE_PLACEHOLDER, () => escapeAttribute(`${mountedPath}/`));
      page = { body: Buffer.from(html), type: TYPES['.html'] };
      this.pages.set(mountedPath, page);
    }
    return page;
  }

  file(name: string): Asset {
    const asset = this.files.get(name);
    if (!asset) throw new NotFoundException(`No dashboard asset "${name}"`);
    return asset;
  }
}

function escapeAttribute(value: string): string {
  return value.replace(/&/g, '&amp;').replace(/"/g, '&quot;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
}
