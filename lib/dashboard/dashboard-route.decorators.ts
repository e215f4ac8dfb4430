import { SetMetadata } from '@nestjs/common';
import { DASHBOARD_PUBLIC, DASHBOARD_WRITE } from './dashboard.constants';

/** Reachable without the token. */
export const PublicRoute = (): MethodDecorator => SetMetadata(DASHBOARD_PUBLIC, true);

/** Changes data: refused when the dashboard is read-only. */
export const WriteRoute = (): MethodDecorator => SetMetadata(DASHBOARD_WRITE, true);
