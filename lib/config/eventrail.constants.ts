/**
 * Injection token of the resolved module options. Each feature injects it typed as the view it reads
 * (`ResolvedLogOptions & ...`); the module's `ResolvedEventrailOptions` has every view.
 */
export const EVENTRAIL_OPTIONS = Symbol('EVENTRAIL_OPTIONS');
/** Injection token of the raw options given to `forRoot` / returned by the `forRootAsync` factory. */
export const EVENTRAIL_RAW_OPTIONS = Symbol('EVENTRAIL_RAW_OPTIONS');
