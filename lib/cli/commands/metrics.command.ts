import type { Command } from 'commander';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { once } from 'node:events';
import { HttpException } from '@nestjs/common';
import { notLocalReason } from '../../dashboard/dashboard-caller';
import { MissingPeerDependencyError } from '../../errors/missing-peer-dependency.error';
import { UnknownGroupError } from '../../errors/unknown-group.error';
import { GroupLagReader } from '../../metrics/group-lag.reader';
import { LagReadGate } from '../../metrics/lag-read.gate';
import { DEFAULT_LAG_TIMEOUT_MS } from '../../metrics/lag-metrics.options';
import type * as LagPrometheus from '../../metrics/lag.prometheus';
import { BearerToken } from '../../util/bearer-token';
import { describeError } from '../../util/describe-error';
import { importOptionalPeer } from '../../util/optional-peer';
import { CliUsageError } from '../errors/cli-usage.error';
import { parseCount, parseNonNegative } from '../runtime/argument.parser';
import type { CliRunner } from '../runtime/cli.runner';
import { examples } from '../runtime/help.text';
import { formatList } from '../runtime/value.format';

/** The environment variable holding the bearer token; a flag would show it in `ps`. */
const TOKEN_ENV = 'EVENTRAIL_METRICS_TOKEN';
const LOOPBACK_HOSTS = new Set(['127.0.0.1', '::1', 'localhost']);

interface MetricsFlags {
  listen: number;
  host: string;
  group?: string[];
  refreshMs: number;
  timeoutMs: number;
}

export function registerMetricsCommand(program: Command, runner: CliRunner): void {
  program
    .command('metrics')
    .description(
      "serve every group's lag over HTTP until Ctrl-C: Prometheus text on /metrics, JSON on /lag and /lag/<group> (KEDA metrics-api)",
    )
    .requiredOption('--listen <port>', 'TCP port to serve on (0: any free port, printed on stderr)', parseNonNegative)
    .option('--host <address>', 'address to bind; anything but this machine needs EVENTRAIL_METRICS_TOKEN', '127.0.0.1')
    .option('--group <groups...>', 'only these groups (default: every registered group)')
    .option(
      '--refresh-ms <ms>',
      'read Redis on this schedule and answer scrapes from the latest read (0: read at each scrape)',
      parseNonNegative,
      0,
    )
    .option(
      '--timeout-ms <ms>',
      'longest wait for Redis per read: past it a request answers 503, and no read is queued behind an unanswered one',
      parseCount,
      DEFAULT_LAG_TIMEOUT_MS,
    )
    .addHelpText(
      'after',
      examples([
        'eventrail metrics --listen 9464',
        'EVENTRAIL_METRICS_TOKEN=s3cret eventrail metrics --listen 9464 --host 0.0.0.0 --group billing mailer',
      ]) +
        `\nWithout ${TOKEN_ENV} only this machine may ask (bind and callers both); with it every request needs Authorization: Bearer <token>.` +
        '\nRequires prom-client. Stops with exit code 0 on SIGINT or SIGTERM.\n',
    )
    .action(
      runner.action<MetricsFlags>(async (ctx, _args, flags) => {
        const token = process.env[TOKEN_ENV] || null;
        if (token === null && !LOOPBACK_HOSTS.has(flags.host))
          throw new CliUsageError(`--host ${flags.host} would let other machines read the lag: set ${TOKEN_ENV}, or bind 127.0.0.1`);
        const { Registry } = await importOptionalPeer(
          () => import('prom-client'),
          (error) => new MissingPeerDependencyError('prom-client', 'eventrail metrics', error),
        );
        // Loaded here, not with the CLI: it loads prom-client, which the other commands do without.
        // eslint-disable-next-line @typescript-eslint/no-require-imports
        const { registerLagMetrics } = require('../../metrics/lag.prometheus') as typeof LagPrometheus;
        const session = await ctx.open();
        const registry = new Registry();
        const groups = flags.group ? [...new Set(flags.group)] : undefined;
        const { refreshMs, timeoutMs } = flags;
        const metrics = registerLagMetrics(session.admin, { registry, groups, refreshMs, timeoutMs });
        const served: Served = {
          reader: new GroupLagReader(session.admin),
          gate: new LagReadGate(timeoutMs),
          registry,
          groups,
          token: BearerToken.of(token),
        };
        const server = createServer((request, response) => void serve(request, response, served));
        let stop = (): void => undefined;
        const stopping = new Promise<void>((resolve) => (stop = resolve));
        process.once('SIGINT', stop);
        process.once('SIGTERM', stop);
        try {
          server.listen(flags.listen, flags.host);
          await once(server, 'listening');
          const { port } = server.address() as { port: number };
          const which = groups ? `groups ${formatList(groups)}` : 'every group';
          // Tests and scripts wait for this line to know the port.
          ctx.output.notice(
            `Serving the lag of ${which} of "${session.prefix}" on http://${hostForUrl(flags.host)}:${port} (/metrics, /lag)`,
          );
          await stopping;
        } finally {
          process.removeListener('SIGINT', stop);
          process.removeListener('SIGTERM', stop);
          metrics.stop();
          await close(server);
        }
      }),
    );
}

interface Served {
  reader: GroupLagReader;
  /** Bounds the JSON routes' reads as the gauges' own gate bounds theirs. */
  gate: LagReadGate;
  registry: { metrics(): Promise<string>; contentType: string };
  groups: readonly string[] | undefined;
  token: BearerToken | null;
}

async function serve(request: IncomingMessage, response: ServerResponse, { reader, gate, registry, groups, token }: Served): Promise<void> {
  try {
    if (request.method !== 'GET' && request.method !== 'HEAD') return send(response, 405, { error: 'Only GET is served' });
    if (token === null) {
      const reason = notLocalReason({ method: request.method, headers: request.headers, socket: request.socket }, false);
      if (reason !== null) return send(response, 403, { error: `Without ${TOKEN_ENV} only this machine may ask (${reason})` });
    } else {
      token.verify(request.headers.authorization, (name, value) => response.setHeader(name, value));
    }
    const path = new URL(request.url ?? '/', 'http://localhost').pathname.replace(/\/+$/, '');
    if (path === '/metrics') {
      const text = await registry.metrics();
      response.writeHead(200, { 'content-type': registry.contentType });
      return void response.end(text);
    }
    if (path === '/lag') return send(response, 200, await gate.run('report', () => reader.report(groups)));
    const group = /^\/lag\/([^/]+)$/.exec(path)?.[1];
    if (group !== undefined) {
      const name = decodeName(group);
      if (name === null) return send(response, 400, { error: `Not a percent-encoded group name: ${JSON.stringify(group)}` });
      if (groups && !groups.includes(name)) return send(response, 404, { error: `Group "${name}" is not exported here (--group)` });
      return send(response, 200, await gate.run(`group:${name}`, () => reader.group(name)));
    }
    send(response, 404, { error: 'Not found: /metrics, /lag or /lag/<group>' });
  } catch (error) {
    if (error instanceof HttpException) return send(response, error.getStatus(), { error: error.message });
    if (error instanceof UnknownGroupError) return send(response, 404, { error: error.message });
    // Redis down, or slower than --timeout-ms (LagReadTimeoutError): no number rather than a stale one.
    send(response, 503, { error: `Reading the lag failed: ${describeError(error)}` });
  }
}

function send(response: ServerResponse, status: number, body: unknown): void {
  response.writeHead(status, { 'content-type': 'application/json; charset=utf-8' });
  response.end(JSON.stringify(body));
}

/** The group name in a path, or null when its percent-encoding is broken (`%E0`): the caller's mistake, not Redis's. */
function decodeName(segment: string): string | null {
  try {
    return decodeURIComponent(segment);
  } catch {
    return null;
  }
}

function hostForUrl(host: string): string {
  return host.includes(':') ? `[${host}]` : host;
}

/** Closes the server, ending idle keep-alive connections so a scraper holding one cannot keep the process up. */
function close(server: Server): Promise<void> {
  if (!server.listening) return Promise.resolve();
  const closed = new Promise<void>((resolve) => server.close(() => resolve()));
  server.closeAllConnections();
  return closed;
}
