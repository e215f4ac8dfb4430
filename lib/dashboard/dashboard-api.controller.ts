import {
  Body,
  Delete,
  Get,
  HttpCode,
  Inject,
  Injectable,
  NotFoundException,
  Options,
  Param,
  Post,
  Query,
  ServiceUnavailableException,
} from '@nestjs/common';
import { EventrailAdmin } from '../admin/eventrail-admin';
import type { DashboardOverview, GroupStatus, LogEntry, LogPage, ParkedKey } from '../admin/admin.types';
import { InvalidOptionError } from '../errors/invalid-option.error';
import type { DeadLetter } from '../wire/dead-letter.codec';
import type { GroupLag } from '../metrics/group-lag';
import { GroupLagReader, type LagReport } from '../metrics/group-lag.reader';
import { DEFAULT_LAG_TIMEOUT_MS } from '../metrics/lag-metrics.options';
import { LagReadGate } from '../metrics/lag-read.gate';
import { LagReadTimeoutError } from '../metrics/lag-read-timeout.error';
import { DASHBOARD_OPTIONS } from './dashboard.constants';
import type { ResolvedDashboardOptions } from './dashboard.options';
import { fromParam, integerParam, listParam, optionalString, parkedKeyBody, replayTarget } from './dashboard-query';
import { PublicRoute, WriteRoute } from './dashboard-route.decorators';

/** Newest dead letters shown as a group's recent errors. */
const RECENT_ERRORS = 10;

/**
 * The dashboard's JSON API under `<path>/api`, a thin layer over
 * `EventrailAdmin`: it reads query strings and bodies into the service's
 * options and nothing else. `EventrailDashboardModule` mounts a subclass at
 * the configured path, behind `DashboardAccessGuard`.
 */
@Injectable()
export class DashboardApiController {
  /** A scaler polls these routes: bounded like the exporter's, so a frozen Redis answers 503 instead of holding requests. */
  private readonly lagReads = new LagReadGate(DEFAULT_LAG_TIMEOUT_MS);

  constructor(
    private readonly admin: EventrailAdmin,
    @Inject(DASHBOARD_OPTIONS) private readonly options: ResolvedDashboardOptions,
  ) {}

  /** What the UI needs before it asks for the token. */
  @Get('config')
  @PublicRoute()
  config(): { authRequired: boolean; readOnly: boolean; refreshMs: number } {
    return { authRequired: this.options.token !== null, readOnly: this.options.readOnly, refreshMs: this.options.refreshMs };
  }

  @Get('overview')
  overview(): Promise<DashboardOverview> {
    return this.admin.overview();
  }

  @Get('groups')
  groups(): Promise<GroupStatus[]> {
    return this.admin.groups();
  }

  @Get('groups/:name')
  async group(@Param('name') name: string): Promise<GroupStatus & { recentErrors: DeadLetter[] }> {
    const status = await this.admin.group(name);
    const recentErrors = await this.admin.deadLetters(name, { count: RECENT_ERRORS, newestFirst: true });
    return { ...status, recentErrors };
  }

  /** Newest first by default (`order=oldest` for the other way); `next` continues the listing. */
  @Get('groups/:name/dead-letters')
  async deadLetters(
    @Param('name') name: string,
    @Query() query: Record<string, unknown>,
  ): Promise<{ items: DeadLetter[]; next: string | null; total: number }> {
    const count = integerParam('count', query.count, 50);
    const order = optionalString('order', query.order) ?? 'newest';
    if (order !== 'newest' && order !== 'oldest') throw new InvalidOptionError('order', order, '"newest" or "oldest"');
    // A page stops at `count` or at the byte budget: `next` says whether more follow either way.
    const [{ items, next }, total] = await Promise.all([
      this.admin.deadLetterPage(name, { count, after: optionalString('after', query.after), newestFirst: order === 'newest' }),
      this.admin.deadLetterCount(name),
    ]);
    return { items, next, total };
  }

  @Get('groups/:name/dead-letters/:id')
  async deadLetter(@Param('name') name: string, @Param('id') id: string): Promise<DeadLetter> {
    const letter = await this.admin.deadLetter(name, id);
    if (!letter) throw new NotFoundException(`No dead letter ${id} in group "${name}" (replayed, purged or never there)`);
    return letter;
  }

  @Post('groups/:name/dead-letters/replay')
  @WriteRoute()
  @HttpCode(200)
  async replay(@Param('name') name: string, @Body() body: unknown): Promise<{ replayed: number }> {
    return { replayed: await this.admin.replayDeadLetters(name, replayTarget(body)) };
  }

  @Delete('groups/:name/dead-letters')
  @WriteRoute()
  async purge(@Param('name') name: string): Promise<{ purged: number }> {
    return { purged: await this.admin.purgeDeadLetters(name) };
  }

  /** The group's parked lines (`ordering` `'key'` or `'unordered'`), by partition then oldest first. */
  @Get('groups/:name/parked')
  parked(@Param('name') name: string): Promise<ParkedKey[]> {
    return this.admin.parkedKeys(name);
  }

  /** `{}` tries every parked key now, `{ "key": "..." }` one of them; a named key that is not parked is a 404. */
  @Post('groups/:name/parked/retry')
  @WriteRoute()
  @HttpCode(200)
  async retryParked(@Param('name') name: string, @Body() body: unknown): Promise<{ partitions: number }> {
    const key = parkedKeyBody(body, false);
    const partitions = await this.admin.retryParked(name, key === undefined ? {} : { key });
    if (key !== undefined && partitions === 0) throw notParked(name, key);
    return { partitions };
  }

  /** `{ "key": "..." }`: the head of that key's line dead-lettered now; a key that is not parked is a 404. */
  @Post('groups/:name/parked/give-up')
  @WriteRoute()
  @HttpCode(200)
  async giveUpParked(@Param('name') name: string, @Body() body: unknown): Promise<{ partitions: number }> {
    const key = parkedKeyBody(body, true) as string;
    const partitions = await this.admin.giveUpParked(name, { key });
    if (partitions === 0) throw notParked(name, key);
    return { partitions };
  }

  /** Every group's lag, read from Redis with or without workers: what a scaler (KEDA's `metrics-api`) polls. */
  @Get('lag')
  lag(): Promise<LagReport> {
    return this.boundedLag('report', (reader) => reader.report());
  }

  /** One group's lag as a flat object, so a scaler's value path is just `lag` (or `usefulWorkers`). */
  @Get('lag/:group')
  groupLag(@Param('group') group: string): Promise<GroupLag> {
    return this.boundedLag(`group:${group}`, (reader) => reader.group(group));
  }

  private async boundedLag<T>(key: string, read: (reader: GroupLagReader) => Promise<T>): Promise<T> {
    try {
      return await this.lagReads.run(key, () => read(new GroupLagReader(this.admin)));
    } catch (error) {
      if (error instanceof LagReadTimeoutError) throw new ServiceUnavailableException(error.message);
      throw error;
    }
  }

  @Get('log')
  log(@Query() query: Record<string, unknown>): Promise<LogPage> {
    return this.admin.readLog(integerParam('partition', query.partition, 0), {
      from: fromParam(query.from),
      after: optionalString('after', query.after),
      count: integerParam('count', query.count, 50),
      events: listParam('event', query.event),
    });
  }

  @Get('log/:partition/:offset')
  async entry(@Param('partition') partition: string, @Param('offset') offset: string): Promise<LogEntry> {
    const entry = await this.admin.logEntry(integerParam('partition', partition), offset);
    if (!entry) throw new NotFoundException(`No entry ${offset} in partition ${partition} (trimmed or never there)`);
    return entry;
  }

  /** CORS preflights; the guard answers them (headers for listed origins, 403 for the rest). */
  @Options([
    'config',
    'overview',
    'groups',
    'groups/:name',
    'groups/:name/dead-letters',
    'groups/:name/dead-letters/:id',
    'groups/:name/dead-letters/replay',
    'groups/:name/parked',
    'groups/:name/parked/retry',
    'groups/:name/parked/give-up',
    'lag',
    'lag/:group',
    'log',
    'log/:partition/:offset',
  ])
  @PublicRoute()
  @HttpCode(204)
  preflight(): void {}
}

function notParked(group: string, key: string): NotFoundException {
  return new NotFoundException(`No parked line of key ${JSON.stringify(key)} in group "${group}" (released, given up, or never parked)`);
}
