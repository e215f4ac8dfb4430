import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';

/**
 * Every relative link in the README and docs/ leads to a file the package
 * ships (package.json `files`), and a `#heading` to a heading of that page,
 * so the links work from an installed copy as well as from the repository.
 */
const ROOT = join(__dirname, '..', '..');
const SHIPPED: string[] = (JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { files: string[] }).files;

function markdownFiles(): string[] {
  const found = ['README.md', 'ARCHITECTURE.md', 'CONTRIBUTING.md', 'CHANGELOG.md'].filter((file) => existsSync(join(ROOT, file)));
  const walk = (dir: string): void => {
    for (const name of readdirSync(join(ROOT, dir))) {
      const path = join(dir, name);
      if (statSync(join(ROOT, path)).isDirectory()) walk(path);
      else if (name.endsWith('.md')) found.push(path);
    }
  };
  walk('docs');
  return found;
}

/** GitHub's heading anchors: lower case, punctuation other than `-` and `_` dropped, spaces to `-`. */
function anchorsOf(file: string): Set<string> {
  const anchors = new Set<string>();
  const seen = new Map<string, number>();
  let fenced = false;
  for (const line of readFileSync(file, 'utf8').split('\n')) {
    if (line.startsWith('```')) fenced = !fenced;
    const heading = !fenced && /^#{1,6}\s+(.*)$/.exec(line);
    if (!heading) continue;
    const slug = heading[1]
      .trim()
      .toLowerCase()
      .replace(/[^\p{L}\p{N}\s_-]/gu, '')
      .replace(/\s/g, '-');
    const count = seen.get(slug) ?? 0;
    seen.set(slug, count + 1);
    anchors.add(count === 0 ? slug : `${slug}-${count}`);
  }
  return anchors;
}

function linksOf(file: string): string[] {
  const text = readFileSync(join(ROOT, file), 'utf8').replace(/```[\s\S]*?```/g, '');
  return [...text.matchAll(/\]\(([^)\s]+)\)/g)].map((match) => match[1]).filter((link) => !/^[a-z]+:/i.test(link));
}

describe('links in the README and docs', () => {
  const files = markdownFiles();

  it('finds the pages (a check that an empty list cannot pass)', () => {
    expect(files).toContain('README.md');
    expect(files.filter((file) => file.startsWith('docs')).length).toBeGreaterThan(10);
  });

  it.each(files)('%s: every relative link resolves to a shipped file and heading', (file) => {
    const broken: string[] = [];
    for (const link of linksOf(file)) {
      const [path, anchor] = link.split('#', 2);
      const target = path === '' ? join(ROOT, file) : resolve(dirname(join(ROOT, file)), decodeURI(path));
      const inRepo = relative(ROOT, target);
      if (!existsSync(target)) broken.push(`${link}: no such file`);
      else if (!SHIPPED.some((entry) => inRepo === entry || inRepo.startsWith(`${entry}/`)))
        broken.push(`${link}: not in package.json files`);
      else if (anchor && target.endsWith('.md') && !anchorsOf(target).has(anchor)) broken.push(`${link}: no such heading`);
    }
    expect(broken).toEqual([]);
  });
});
