import { EventrailError } from './eventrail.error';

/** An option needs an optional peer dependency that is not installed. Thrown at startup. */
export class MissingPeerDependencyError extends EventrailError {
  constructor(
    readonly packageName: string,
    readonly option: string,
    override readonly cause?: unknown,
  ) {
    super(`${option} needs the package ${packageName}, which is not installed: npm install ${packageName}`);
  }
}
