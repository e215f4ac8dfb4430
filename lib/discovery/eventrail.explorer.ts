import { Injectable, Logger, OnApplicationBootstrap } from '@nestjs/common';
import { DiscoveryService } from '@nestjs/core';
import type { InstanceWrapper } from '@nestjs/core/injector/instance-wrapper.js';
import { Inject } from '@nestjs/common';
import { EventrailConsumers } from '../consumer/eventrail-consumers';
import type { HandlerBinding } from '../consumer/handler-binding';
import type { OnEventDeclaration } from '../decorators/on-event.decorator';
import { EVENTRAIL_OPTIONS, ON_EVENT_METADATA } from '../eventrail.constants';
import type { EventrailMessage } from '../eventrail-message';
import { validateGroupName, type ResolvedEventrailOptions } from '../eventrail.options';
import { EventrailError } from '../errors/eventrail.error';
import { InvalidHandlerError } from '../errors/invalid-handler.error';
import { validateEventName } from '../log/validate-event';

interface GroupPlan {
  handlers: Map<string, HandlerBinding[]>;
  declared: Array<{ path: string; options: object }>;
}

/**
 * Finds `@OnEvent` methods once every module is initialised, validates them
 * (failing startup with the class and method named), groups them by consumer
 * group and hands them to `EventrailConsumers`, which it then starts unless
 * `autoStart` is false.
 */
@Injectable()
export class EventrailExplorer implements OnApplicationBootstrap {
  private readonly logger = new Logger(EventrailExplorer.name);

  constructor(
    private readonly discovery: DiscoveryService,
    private readonly consumers: EventrailConsumers,
    @Inject(EVENTRAIL_OPTIONS) private readonly options: ResolvedEventrailOptions,
  ) {}

  async onApplicationBootstrap(): Promise<void> {
    const plans = this.explore();
    for (const [group, plan] of plans) this.consumers.register(group, plan.handlers, plan.declared);
    if (!this.options.autoStart || plans.size === 0) return;
    if (this.options.allowDegradedStart) {
      void this.consumers.start().catch((error: unknown) => this.logger.error(`Consumers could not start: ${(error as Error).message}`));
      return;
    }
    await this.consumers.start();
  }

  private explore(): Map<string, GroupPlan> {
    const plans = new Map<string, GroupPlan>();
    const seen = new Set<unknown>();
    for (const wrapper of [...this.discovery.getProviders(), ...this.discovery.getControllers()]) {
      const metatype = wrapper.metatype as { name?: string; prototype?: object } | null;
      if (!metatype?.prototype || seen.has(wrapper.instance ?? wrapper)) continue;
      const declarations = Reflect.getMetadata(ON_EVENT_METADATA, metatype) as OnEventDeclaration[] | undefined;
      if (!declarations?.length) continue;
      seen.add(wrapper.instance ?? wrapper);
      const className = metatype.name ?? 'anonymous class';
      for (const declaration of declarations) this.add(plans, wrapper, className, declaration);
    }
    return plans;
  }

  private add(plans: Map<string, GroupPlan>, wrapper: InstanceWrapper, className: string, d: OnEventDeclaration): void {
    const member = String(d.member);
    if (!wrapper.isDependencyTreeStatic() || wrapper.isTransient) {
      throw new InvalidHandlerError(
        className,
        member,
        'the provider is request-scoped or transient; event handlers need a singleton provider',
      );
    }
    if (!d.isMethod) throw new InvalidHandlerError(className, member, 'it is not a method');
    const events = Array.isArray(d.events) ? (d.events as unknown[]) : [d.events];
    if (events.length === 0) throw new InvalidHandlerError(className, member, 'no event names given');
    try {
      validateGroupName('group', d.group);
      for (const event of events) validateEventName(event);
    } catch (error) {
      if (error instanceof EventrailError) throw new InvalidHandlerError(className, member, error.message);
      throw error;
    }
    const instance = wrapper.instance as Record<string | symbol, (message: EventrailMessage) => unknown>;
    const binding: HandlerBinding = { name: `${className}.${member}`, call: instance[d.member].bind(instance) };
    const group = d.group as string;
    let plan = plans.get(group);
    if (!plan) plans.set(group, (plan = { handlers: new Map(), declared: [] }));
    for (const event of events as string[]) {
      const list = plan.handlers.get(event) ?? [];
      if (!list.some((b) => b.name === binding.name)) list.push(binding);
      plan.handlers.set(event, list);
    }
    if (Object.keys(d.options).length > 0) plan.declared.push({ path: `@OnEvent on ${className}.${member}`, options: d.options });
  }
}
