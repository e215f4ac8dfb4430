import { Catch, type RpcExceptionFilter } from '@nestjs/common';
import { throwError, type Observable } from 'rxjs';

/**
 * Passes whatever an `@EventPattern` handler threw on to eventrail unchanged.
 * Nest's default RPC filter replaces an unknown error with
 * `{ status: 'error', message: 'Internal server error' }`: the attempt still
 * fails and is retried, but a `NonRetryableError` is no longer recognised (it
 * is retried like any error) and the dead letter only says "Internal server
 * error". Install it with `microservice.useGlobalFilters(new EventrailExceptionFilter())`
 * or `@UseFilters(EventrailExceptionFilter)`; filters of your own that catch
 * more specific errors still run first.
 */
@Catch()
export class EventrailExceptionFilter implements RpcExceptionFilter<unknown> {
  catch(exception: unknown): Observable<never> {
    return throwError(() => exception);
  }
}
