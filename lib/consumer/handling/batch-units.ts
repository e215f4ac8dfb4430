/** How an entry of a fetched batch is run: passed over without a call, on its own, or in a batch of a batch handler. */
export type Route<B> = 'skip' | 'single' | B;

/** Entries run together: one call of batch handler `batch` over `indexes`, or a single entry (`batch` undefined). */
export interface Unit<B> {
  indexes: number[];
  batch?: B;
}

/**
 * True when `a` and `b` are the same batch handler: one binding, or the
 * bindings of one method for several of its events (`@OnEvent(['a', 'b'],
 * { batch })` binds each event apart, all with the same `call`).
 */
function sameHandler<B extends { call?: unknown }>(a: B, b: B): boolean {
  return a === b || (a.call !== undefined && a.call === b.call);
}

/**
 * Cuts a fetched batch into units, in log order. Consecutive entries routed
 * to the same batch handler (whichever of its events) form one batch of at
 * most `maxSize`; an entry run
 * on its own, or one of another batch handler, ends it. Entries passed over
 * (no handler in the group, replayed to another group, already done) end
 * nothing: they are done without a call. Pure, for unit tests.
 */
export function formUnits<B extends { maxSize: number; call?: unknown }>(routes: ReadonlyArray<Route<B>>): Array<Unit<B>> {
  const units: Array<Unit<B>> = [];
  let open: Unit<B> | undefined;
  for (let i = 0; i < routes.length; i++) {
    const route = routes[i];
    if (route === 'skip') continue;
    if (route === 'single') {
      open = undefined;
      units.push({ indexes: [i] });
      continue;
    }
    if (!open?.batch || !sameHandler(open.batch, route) || open.indexes.length >= route.maxSize) {
      open = { indexes: [], batch: route };
      units.push(open);
    }
    open.indexes.push(i);
  }
  return units;
}
