// One variant of an isolated scenario (`Scenario.isolated`), in a process of its own for the whole
// scenario: each `run` command runs the variant once, at the size asked (the warm-up, then each round, at
// the rounds' size), and reports its measurement. So the JIT of one system never sees another's
// code: in one process, running eventrail's publish transactions and a raw Lua writer before it made a
// raw corked XADD cost 5.3 µs of client CPU instead of 3.4.
import Redis from 'ioredis';
import { scenarioFactories } from '../scenarios';
import { childConfig, onCommands, report, runChild } from '../support/children';
import type { Scenario, Size } from '../support/scenario';

export interface VariantRunnerConfig {
  url: string;
  scenario: string;
  variant: string;
}

async function main(): Promise<void> {
  const config = childConfig<VariantRunnerConfig>();
  const admin = new Redis(config.url);
  const scenarios = new Map<Size, Scenario>();
  const scenarioOf = (size: Size): Scenario => {
    let scenario = scenarios.get(size);
    if (!scenario) {
      scenario = scenarioFactories.map((factory) => factory(size)).find((s) => s.id === config.scenario);
      if (!scenario) throw new Error(`no scenario ${config.scenario}`);
      scenarios.set(size, scenario);
    }
    return scenario;
  };
  onCommands({
    run: async ({ prefix, size }) => {
      const variant = scenarioOf(size).variants.find((v) => v.id === config.variant);
      if (!variant) throw new Error(`no variant ${config.variant} in ${config.scenario}`);
      report({ type: 'measured', measurement: await variant.run({ url: config.url, admin, prefix }) });
    },
    stop: async () => {
      admin.disconnect();
      process.exit(0);
    },
  });
}

runChild(main);
