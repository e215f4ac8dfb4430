import type { Link } from '@opentelemetry/api';
import { isMalformed } from '../wire/codec';
import type { Redelivery, RedeliveryKind } from './redelivery.types';
import { parseHeaders, producerContext, REPLAY_HEADER } from '../tracing/trace-headers';
import { describeError } from '../util/describe-error';
import { ATTR, eventrailTracer, liveOpenTelemetry, MESSAGING_SYSTEM } from '../tracing/open-telemetry';
import type { ResolvedTracingOptions } from '../tracing/tracing.options';

/**
 * A PRODUCER span `replay <event>` (or `replay batch`; `restore ...` for an
 * archive restore) around one re-delivery to `group`, with an
 * `eventrail.replay` (`eventrail.restore`) event, linked to the original
 * producers; the items come back with `replaytraceparent` in their headers.
 * Undefined when tracing is off or OpenTelemetry is absent.
 */
export function startRedeliverySpan(
  tracing: ResolvedTracingOptions,
  prefix: string,
  group: string,
  items: readonly Redelivery[],
  kind: RedeliveryKind = 'replay',
): { items: Redelivery[]; track<T>(appended: Promise<T>): Promise<T> } | undefined {
  const api = liveOpenTelemetry(tracing.enabled);
  if (!api || items.length === 0) return undefined;
  const names = new Set(items.map(({ entry }) => (isMalformed(entry) ? '(malformed)' : entry.event)));
  const name = names.size === 1 ? [...names][0] : 'batch';
  const links: Link[] = [];
  for (const { entry } of items) {
    const context = isMalformed(entry) ? undefined : producerContext(api, parseHeaders(entry.headers).traceparent);
    if (context) links.push({ context });
  }
  const span = eventrailTracer(api).startSpan(`${kind} ${name}`, {
    kind: api.SpanKind.PRODUCER,
    attributes: {
      [ATTR.system]: MESSAGING_SYSTEM,
      [ATTR.operationType]: 'send',
      [ATTR.operationName]: kind,
      [ATTR.destination]: name,
      [ATTR.group]: group,
      [ATTR.prefix]: prefix,
      [ATTR.batchCount]: items.length,
    },
    links,
  });
  span.addEvent(`eventrail.${kind}`, { [ATTR.group]: group, 'eventrail.events': items.length });
  const carrier: Record<string, string> = {};
  api.propagation.inject(api.trace.setSpan(api.context.active(), span), carrier);
  const marked = carrier.traceparent;
  const traced = items.map((item): Redelivery => {
    if (marked === undefined || isMalformed(item.entry)) return item;
    const headers = { ...parseHeaders(item.entry.headers), [REPLAY_HEADER]: marked };
    return { ...item, entry: { ...item.entry, headers: JSON.stringify(headers) } };
  });
  const track = async <T>(appended: Promise<T>): Promise<T> => {
    try {
      return await appended;
    } catch (error) {
      span.setStatus({ code: api.SpanStatusCode.ERROR, message: describeError(error) });
      throw error;
    } finally {
      span.end();
    }
  };
  return { items: traced, track };
}
