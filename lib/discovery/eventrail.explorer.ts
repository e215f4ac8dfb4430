import { Inject, Injectable, OnModuleInit } from '@nestjs/common';
import { DiscoveryService } from '@nestjs/core';
import type { InstanceWrapper } from '@nestjs/core/injector/instance-wrapper.js';
import { EventrailConsumers } from '../consumer/lifecycle/eventrail-consumers';
import type { GroupPlan, HandlerBinding } from '../consumer/handling/group-plan';
import { batchBinding } from '../consumer/handling/batch-binding';
import { ON_EVENT_METADATA, type OnEventDeclaration } from '../decorators/on-event.decorator';
import { EVENTRAIL_OPTIONS } from '../config/eventrail.constants';
import type { EventrailMessage } from '../events/eventrail-message';
import {
  CONSUMER_OPTION_NAMES,
  resolveBatchOptions,
  resolveConsumerOptions,
  validateGroupName,
  type ConsumerOptions,
  type ConsumersView,
  type ResolvedConsumerOptions,
} from '../consumer/consumer.options';
import { EventrailError } from '../errors/eventrail.error';
import { InvalidHandlerError } from '../errors/invalid-handler.error';
import { validateEventName } from '../events/validate-event';
import { eventOf } from '../events/event-definition';
import type { StandardSchemaV1 } from '@standard-schema/spec';

/** A group's plan while the explorer collects it: handlers by event, and the options its `@OnEvent`s wrote. */
interface PlanDraft {
  handlers: Map<string, HandlerBinding[]>;
  /** The module's `consumer` options under `groups.<name>`: what the decorators' options go over. */
  base: ResolvedConsumerOptions;
  /** Each option some `@OnEvent` of the group set, with the method that set it first. */
  written: Map<keyof ConsumerOptions, { value: unknown; by: string }>;
}

/**
 * Finds `@OnEvent` methods once every provider exists (`onModuleInit`),
 * validates them (failing startup with the class and method named), groups
 * them by consumer group with each group's options resolved, and hands the
 * plans to `EventrailConsumers`, which runs them.
 */
@Injectable()
export class EventrailExplorer implements OnModuleInit {
  constructor(
    private readonly discovery: DiscoveryService,
    private readonly consumers: EventrailConsumers,
    @Inject(EVENTRAIL_OPTIONS) private readonly options: ConsumersView,
  ) {}

  onModuleInit(): void {
    for (const plan of this.explore()) this.consumers.register(plan);
  }

  private explore(): GroupPlan[] {
    const drafts = new Map<string, PlanDraft>();
    const seen = new Set<unknown>();
    for (const wrapper of [...this.discovery.getProviders(), ...this.discovery.getControllers()]) {
      const metatype = wrapper.metatype as { name?: string; prototype?: object } | null;
      if (!metatype?.prototype || seen.has(wrapper.instance ?? wrapper)) continue;
      const declarations = Reflect.getMetadata(ON_EVENT_METADATA, metatype) as OnEventDeclaration[] | undefined;
      if (!declarations?.length) continue;
      seen.add(wrapper.instance ?? wrapper);
      const className = metatype.name ?? 'anonymous class';
      for (const declaration of declarations) this.add(drafts, wrapper, className, declaration);
    }
    return [...drafts].map(([group, { handlers, base, written }]) => {
      // Resolved once from everything written, so the result does not depend on which method came first.
      const options = resolveConsumerOptions(
        `@OnEvent options of group "${group}"`,
        Object.fromEntries([...written].map(([key, { value }]) => [key, value])) as ConsumerOptions,
        base,
      );
      return { group, handlers, options };
    });
  }

  private add(drafts: Map<string, PlanDraft>, wrapper: InstanceWrapper, className: string, d: OnEventDeclaration): void {
    const member = String(d.member);
    if (!wrapper.isDependencyTreeStatic() || wrapper.isTransient) {
      throw new InvalidHandlerError(
        className,
        member,
        'the provider is request-scoped or transient; event handlers need a singleton provider',
      );
    }
    if (!d.isMethod) throw new InvalidHandlerError(className, member, 'it is not a method');
    const events = (Array.isArray(d.events) ? (d.events as unknown[]) : [d.events]).map(eventOf);
    if (events.length === 0) throw new InvalidHandlerError(className, member, 'no event names given');
    let batch: ReturnType<typeof resolveBatchOptions> | undefined;
    try {
      validateGroupName('group', d.group);
      for (const event of events) validateEventName(event.name);
      if (d.batch !== undefined) batch = resolveBatchOptions('batch', d.batch);
    } catch (error) {
      if (error instanceof EventrailError) throw new InvalidHandlerError(className, member, error.message);
      throw error;
    }
    const draft = this.draftOf(drafts, d.group);
    const name = `${className}.${member}`;
    // Checked on their own first, so that a bad value names its method.
    resolveConsumerOptions(`@OnEvent on ${name}`, d.options, draft.base);
    writeGroupOptions(draft, d.group, className, member, d.options);
    const instance = wrapper.instance as Record<string | symbol, (message: never) => unknown>;
    const method = instance[d.member].bind(instance) as (message: never) => unknown;
    for (const { name: event, schema } of events as Array<{ name: string; schema?: StandardSchemaV1 }>) {
      const binding: HandlerBinding = batch
        ? batchBinding(name, method as (messages: EventrailMessage[]) => unknown, batch, schema)
        : { name, call: method as (message: EventrailMessage) => unknown, schema };
      const list = draft.handlers.get(event) ?? [];
      if (list.some((b) => b.name === binding.name)) continue;
      // A batch handler is alone on its events: a batch is retried and split as one call, which another handler of the same event would not follow.
      const other = list.find((b) => b.batch !== undefined) ?? (binding.batch && list[0]);
      if (other) {
        throw new InvalidHandlerError(
          className,
          member,
          `event "${event}" in group "${String(d.group)}" is also handled by ${other.name}; an event handled by a batch handler has no other handler in its group`,
        );
      }
      list.push(binding);
      draft.handlers.set(event, list);
      const clash = shareSchema(list, schema);
      if (clash !== undefined) {
        throw new InvalidHandlerError(
          className,
          member,
          `event "${event}" already has another schema in group "${String(d.group)}" (from ${clash}); ` +
            'handlers of one event in one group must share one defineEvent',
        );
      }
    }
  }

  private draftOf(drafts: Map<string, PlanDraft>, group: string): PlanDraft {
    let draft = drafts.get(group);
    if (!draft) {
      const base = resolveConsumerOptions(`groups.${group}`, this.options.groups[group], this.options.consumer);
      drafts.set(group, (draft = { handlers: new Map(), base, written: new Map() }));
    }
    return draft;
  }
}

/**
 * One schema per event and group: the data is checked (and parsed) once, by
 * the schema of the event's definition, before any handler of it runs; a
 * handler declared by name alone shares it. Two different schemas for one
 * event in one group are refused: an entry that passed one and failed the
 * other could be neither dead-lettered nor handled as a whole. Returns the
 * handler whose other schema clashes with `added`, if one does.
 */
function shareSchema(list: HandlerBinding[], added: StandardSchemaV1 | undefined): string | undefined {
  const other = list.find((b) => b.schema !== undefined && b.schema !== added);
  if (added !== undefined && other !== undefined) return other.name;
  const schema = added ?? other?.schema;
  if (schema !== undefined) for (const binding of list) binding.schema = schema;
  return undefined;
}

/**
 * The decorator's options apply to the whole group (one set of workers reads
 * it), over the module's and `groups.<name>`. Two methods that set one of
 * them to different values are refused: neither would know which one holds.
 * A method that leaves an option unset takes the value its group's other
 * methods set.
 */
function writeGroupOptions(draft: PlanDraft, group: string, className: string, member: string, options: ConsumerOptions): void {
  for (const key of CONSUMER_OPTION_NAMES) {
    const value: unknown = options[key];
    if (value === undefined) continue;
    const earlier = draft.written.get(key);
    if (earlier === undefined) draft.written.set(key, { value, by: `${className}.${member}` });
    else if (!sameValue(earlier.value, value)) {
      throw new InvalidHandlerError(
        className,
        member,
        `"${key}" of group "${group}" is ${JSON.stringify(value)} here and ${JSON.stringify(earlier.value)} in ${earlier.by}; ` +
          `@OnEvent options apply to the whole group, so its methods must agree: set it on one of them, or under groups.${group} in the module options`,
      );
    }
  }
}

/** Equal as option values: by value, into objects (such as `initialOffset`) and Dates, not by reference. */
function sameValue(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (a instanceof Date || b instanceof Date) return a instanceof Date && b instanceof Date && a.getTime() === b.getTime();
  if (typeof a !== 'object' || typeof b !== 'object' || a === null || b === null) return false;
  const x = a as Record<string, unknown>;
  const y = b as Record<string, unknown>;
  return [...new Set([...Object.keys(x), ...Object.keys(y)])].every((key) => sameValue(x[key], y[key]));
}
