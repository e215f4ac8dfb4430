import { Get, Header, Injectable, Param, Req, StreamableFile } from '@nestjs/common';
import { DashboardAssets } from './dashboard-assets';

/** Scripts, styles and API calls from the dashboard's own origin only; nothing inline, no framing. */
const CSP = "default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'self'; frame-ancestors 'none'; form-action 'self'";

/**
 * Serves the single-page UI at `<path>`. The page and its assets hold no data,
 * so they need no token; the UI asks for it and sends it to the API.
 */
@Injectable()
export class DashboardUiController {
  constructor(private readonly assets: DashboardAssets) {}

  @Get()
  @Header('Content-Security-Policy', CSP)
  @Header('X-Content-Type-Options', 'nosniff')
  @Header('Referrer-Policy', 'no-referrer')
  @Header('Cache-Control', 'no-cache')
  page(@Req() request: { url: string }): StreamableFile {
    const { body, type } = this.assets.page(request.url);
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
