import { Inject, Injectable, Logger, OnApplicationBootstrap } from '@nestjs/common';
import { ApplicationConfig, HttpAdapterHost } from '@nestjs/core';
import type { Server } from 'node:net';
import { isLoopbackAddress } from './dashboard-caller';
import { mountedPath } from './dashboard-mount';
import { DASHBOARD_OPTIONS } from './dashboard.constants';
import type { ResolvedDashboardOptions } from './dashboard.options';

/**
 * The dashboard's address, announced once the HTTP server listens. With a generated token (no
 * `auth` given) the link carries it in the fragment, `#token=...`, as notebook servers do: a browser
 * never sends the fragment, so the token stays out of access logs and proxies, and the UI reads it from
 * there. Injectable, for an app that prints or opens the link its own way.
 */
@Injectable()
export class EventrailDashboardLink implements OnApplicationBootstrap {
  private readonly logger = new Logger('EventrailDashboard');
  private link: string | null = null;

  constructor(
    @Inject(DASHBOARD_OPTIONS) private readonly options: ResolvedDashboardOptions,
    private readonly adapterHost: HttpAdapterHost,
    private readonly config: ApplicationConfig,
  ) {}

  /**
   * `http://<host>:<port><path>`, with `#token=<generated token>` when the token was generated;
   * `null` until the server listens (and for good without an HTTP server).
   */
  get url(): string | null {
    return this.link;
  }

  onApplicationBootstrap(): void {
    if (this.options.tokenSource === 'none') {
      this.logger.warn(
        `The dashboard at ${this.options.path} has auth: false: its API needs no token and answers anyone on this machine ` +
          '(other users and local processes included); it is refused when NODE_ENV=production',
      );
    }
    const server = this.adapterHost?.httpAdapter?.getHttpServer() as Server | undefined;
    if (!server || typeof server.once !== 'function') return;
    if (server.listening) this.announce(server);
    else server.once('listening', () => this.announce(server));
  }

  private announce(server: Server): void {
    const address = server.address();
    if (address === null || typeof address === 'string') return; // a pipe: no URL to give
    const host = linkHost(address.address);
    const fragment = this.options.tokenSource === 'generated' ? `#token=${this.options.token}` : '';
    this.link = `http://${host}:${address.port}${mountedPath(this.config, this.options.path)}${fragment}`;
    if (this.options.tokenSource !== 'generated') return;
    this.logger.log(`Dashboard at ${this.link} (token generated at startup; set auth.token to choose one)`);
    if (!isLoopbackAddress(address.address) && address.address !== '0.0.0.0' && address.address !== '::') {
      this.logger.warn(
        `The server listens on ${address.address} only, but without a configured auth.token the dashboard answers ` +
          'loopback connections only: set auth.token, or listen on 127.0.0.1 as well',
      );
    }
  }
}

/** Where a browser on this machine reaches a server bound to `address`. */
function linkHost(address: string): string {
  if (address === '::') return 'localhost';
  if (address === '0.0.0.0') return '127.0.0.1';
  return address.includes(':') ? `[${address}]` : address;
}
