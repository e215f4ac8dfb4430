import { EventrailError } from './eventrail.error';

/** An admin change that running workers would fight (an offset reset, a delete) was refused; pass `force` to fence them. */
export class GroupHasLiveMembersError extends EventrailError {
  constructor(
    readonly group: string,
    readonly members: string[],
    readonly operation: string,
  ) {
    super(
      `Refusing to ${operation} of group "${group}": it has ${members.length} live member(s) (${members.join(', ')}); pass { force: true } to fence them`,
    );
  }
}
