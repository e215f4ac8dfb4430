import { Get, Header, Inject, Injectable, Param, StreamableFile } from '@nestjs/common';
import { ApplicationConfig } from '@nestjs/core';
import { DashboardAssets } from './dashboard-assets';
import { mountedPath } from './dashboard-mount';
import { DASHBOARD_OPTIONS } from './dashboard.constants';
import type { ResolvedDashboardOptions } from './dashboard.options';

/** Scripts, styles and API calls from the dashboard's own origin only; nothing inline, no framing. */
const CSP = "default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'self'; frame-ancestors 'none'; form-action 'self'";

/**
 * Serves the single-page UI at `<path>`. The page and its assets hold no data,
 * so they need no token; the UI takes it from the link's fragment (or asks
 * for it) and sends it to the API.
 */
@Injectable()
export class DashboardUiController {
  constructor(
    private readonly assets: DashboardAssets,
    private readonly config: ApplicationConfig,
    @Inject(DASHBOARD_OPTIONS) private readonly options: ResolvedDashboardOptions,
  ) {}

  @Get()
  @Header('Content-Security-Policy', CSP)
  @Header('X-Content-Type-Options', 'nosniff')
  @Header('Referrer-Policy', 'no-referrer')
  @Header('Cache-Control', 'no-cache')
  page(): StreamableFile {
    const { body, type } = this.assets.page(mountedPath(this.config, this.options.path));
    return new StreamableFile(body, { type, length: body.length });
  }

  @Get('assets/:file')
  @Header('X-Content-Type-Options', 'nosniff')
  @Header('Cache-Control', 'no-cache')
  asset(@Param('file') file: string): StreamableFile {
    const { body, type } = this.assets.file(file);
    return new StreamableFile(body, { type, length: body.length });
  }
}
