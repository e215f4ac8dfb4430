import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Registry } from 'prom-client';
import type { EventrailAdmin, GroupStatus } from '../../lib';
import { groupLag } from '../../lib/metrics/group-lag';
import { registerLagMetrics } from '../../lib/prometheus';
import { parseExposition } from './exposition';

// The manifests of docs/operations/autoscaling.md, parsed as YAML and validated against KEDA's CRD schemas
// and Kubernetes' autoscaling/v2 schema (the validators of @kubernetes-models/keda and kubernetes-models,
// generated from them: types and required fields). Those schemas let unknown fields through, so the field
// names are also held to the lists of KEDA 2.19's docs (reference/scaledobject-spec,
// concepts/authentication, scalers/metrics-api and scalers/prometheus) and of the HPA. And to what
// eventrail serves: the value location must find a number in the endpoint's JSON, the query must name a
// series the exporter writes.

// js-yaml 3 (a dev dependency, also Jest's): its safeLoadAll is all that is used; it ships no types.
// eslint-disable-next-line @typescript-eslint/no-require-imports
const yaml = require('js-yaml') as { safeLoadAll(text: string): unknown[] };

type Doc = Record<string, unknown>;

const PAGE = join(__dirname, '../../docs/operations/autoscaling.md');

/** Every yaml block of the page, each parsed into its documents. */
function manifests(): Doc[] {
  const text = readFileSync(PAGE, 'utf8');
  const blocks = [...text.matchAll(/```yaml\n([\s\S]*?)```/g)].map((m) => m[1]);
  return blocks.flatMap((block) => yaml.safeLoadAll(block) as Doc[]);
}

/** The fields KEDA documents, per object; anything else in a manifest is a typo KEDA would reject or ignore. */
const KEDA = {
  scaledObjectSpec: [
    'scaleTargetRef',
    'pollingInterval',
    'cooldownPeriod',
    'initialCooldownPeriod',
    'idleReplicaCount',
    'minReplicaCount',
    'maxReplicaCount',
    'fallback',
    'advanced',
    'triggers',
  ],
  scaleTargetRef: ['apiVersion', 'kind', 'name', 'envSourceContainerName'],
  trigger: ['type', 'name', 'metadata', 'authenticationRef', 'metricType', 'useCachedMetrics'],
  authenticationRef: ['name', 'kind'],
  'metrics-api': [
    'url',
    'format',
    'valueLocation',
    'targetValue',
    'activationTargetValue',
    'unsafeSsl',
    'aggregateFromKubeServiceEndpoints',
    'aggregationType',
    'authMode',
    'method',
    'keyParamName',
  ],
  prometheus: [
    'serverAddress',
    'query',
    'threshold',
    'activationThreshold',
    'namespace',
    'customHeaders',
    'ignoreNullValues',
    'queryParameters',
    'unsafeSsl',
    'timeout',
    'authModes',
  ],
  triggerAuthenticationSpec: ['secretTargetRef', 'env', 'configMapTargetRef', 'podIdentity', 'hashiCorpVault', 'azureKeyVault'],
  secretTargetRef: ['parameter', 'name', 'key'],
  /** The parameters the metrics-api scaler takes from a TriggerAuthentication for authMode bearer. */
  bearerParameters: ['token'],
};
const HPA = {
  spec: ['scaleTargetRef', 'minReplicas', 'maxReplicas', 'metrics', 'behavior'],
  scaleTargetRef: ['apiVersion', 'kind', 'name'],
  metric: ['type', 'external', 'resource', 'pods', 'object', 'containerResource'],
  external: ['metric', 'target'],
  metricIdentifier: ['name', 'selector'],
  target: ['type', 'value', 'averageValue', 'averageUtilization'],
};

/**
 * Validates each manifest with the schema of its kind, in a child Node (the validator packages are ES
 * modules only); answers the problems, one string per manifest that failed.
 */
function schemaProblems(documents: readonly Doc[]): string[] {
  const script = `
    import { ScaledObject, TriggerAuthentication } from '@kubernetes-models/keda/keda.sh/v1alpha1';
    import { HorizontalPodAutoscaler } from 'kubernetes-models/autoscaling/v2';
    const kinds = { ScaledObject, TriggerAuthentication, HorizontalPodAutoscaler };
    let text = '';
    for await (const chunk of process.stdin) text += chunk;
    const problems = JSON.parse(text).map((doc) => {
      const Model = kinds[doc.kind];
      if (!Model) return doc.kind + ': no schema';
      try { new Model(doc).validate(); return null; } catch (error) { return doc.kind + ': ' + error.message; }
    });
    process.stdout.write(JSON.stringify(problems.filter(Boolean)));`;
  const run = spawnSync(process.execPath, ['--input-type=module', '-e', script], {
    cwd: join(__dirname, '../..'),
    input: JSON.stringify(documents),
    encoding: 'utf8',
  });
  if (run.status !== 0) throw new Error(`the schema check did not run: ${run.stderr}`);
  return JSON.parse(run.stdout) as string[];
}

function keysWithin(where: string, value: unknown, allowed: readonly string[]): void {
  expect({ where, unknown: Object.keys(value as Doc).filter((key) => !allowed.includes(key)) }).toEqual({ where, unknown: [] });
}

/** A GJSON path of the simple kind (dot-separated keys). */
function valueAt(document: unknown, path: string): unknown {
  return path.split('.').reduce<unknown>((value, key) => (value as Doc | undefined)?.[key], document);
}

/** The partition count of the page's module example: the recipes' maximum must be it. */
const PARTITIONS = Number(/```ts[\s\S]*?partitions: (\d+)[\s\S]*?```/.exec(readFileSync(PAGE, 'utf8'))?.[1]);
const status: GroupStatus = {
  name: 'billing',
  events: ['order.placed'],
  members: [],
  partitions: Array.from({ length: PARTITIONS }, (_, p) => ({
    partition: p,
    committed: null,
    lag: p,
    lagCapped: false,
    leaseOwner: null,
    leaseExpiresInMs: null,
    parked: 0,
    oldestParked: null,
  })),
  lag: 120,
  parked: 0,
  deadLetters: 0,
  lastSeen: null,
};

describe('the autoscaling recipes', () => {
  const docs = manifests();
  const scaledObjects = docs.filter((d) => d.kind === 'ScaledObject');
  const triggers = scaledObjects.flatMap((d) => (d.spec as Doc).triggers as Doc[]);

  it('are there: a ScaledObject with the metrics-api scaler, one with the prometheus scaler, its TriggerAuthentication, an HPA', () => {
    expect(PARTITIONS).toBeGreaterThan(1);
    expect(triggers.map((t) => t.type).sort()).toEqual(['metrics-api', 'prometheus']);
    expect(docs.filter((d) => d.kind === 'TriggerAuthentication')).toHaveLength(1);
    expect(docs.filter((d) => d.kind === 'HorizontalPodAutoscaler')).toHaveLength(1);
    expect(docs.map((d) => d.apiVersion).sort()).toEqual(['autoscaling/v2', 'keda.sh/v1alpha1', 'keda.sh/v1alpha1', 'keda.sh/v1alpha1']);
  });

  it("pass KEDA's CRD schemas and the HPA's, and the check catches what those schemas refuse", () => {
    expect(schemaProblems(docs)).toEqual([]);
    const scaled = docs.find((d) => d.kind === 'ScaledObject')!;
    const numeric = JSON.parse(JSON.stringify(scaled)) as Doc;
    ((numeric.spec as Doc).triggers as Doc[])[0].metadata = { url: 'http://x', targetValue: 10 };
    const untargeted = { ...scaled, spec: { ...(scaled.spec as Doc), scaleTargetRef: undefined } };
    expect(schemaProblems([numeric, untargeted])).toEqual([
      expect.stringMatching(/targetValue must be string/),
      expect.stringMatching(/required property 'scaleTargetRef'|required property scaleTargetRef/),
    ]);
  });

  it("use only KEDA's field names, with string metadata, scale from zero at any backlog and stop at the partition count", () => {
    for (const object of scaledObjects) {
      const spec = object.spec as Doc;
      keysWithin('ScaledObject.spec', spec, KEDA.scaledObjectSpec);
      keysWithin('scaleTargetRef', spec.scaleTargetRef, KEDA.scaleTargetRef);
      expect([spec.minReplicaCount, spec.maxReplicaCount]).toEqual([0, PARTITIONS]);
      for (const trigger of spec.triggers as Doc[]) {
        keysWithin('trigger', trigger, KEDA.trigger);
        const metadata = trigger.metadata as Doc;
        keysWithin(`${String(trigger.type)} metadata`, metadata, KEDA[trigger.type as 'metrics-api' | 'prometheus']);
        // KEDA's metadata is a map of strings: a bare number fails the CRD's validation.
        expect(Object.values(metadata).every((value) => typeof value === 'string')).toBe(true);
        const activation = trigger.type === 'prometheus' ? metadata.activationThreshold : metadata.activationTargetValue;
        expect(activation).toBe('0');
        if (trigger.authenticationRef) keysWithin('authenticationRef', trigger.authenticationRef, KEDA.authenticationRef);
      }
    }
    const auth = docs.find((d) => d.kind === 'TriggerAuthentication')!;
    keysWithin('TriggerAuthentication.spec', auth.spec, KEDA.triggerAuthenticationSpec);
    for (const ref of (auth.spec as Doc).secretTargetRef as Doc[]) {
      keysWithin('secretTargetRef', ref, KEDA.secretTargetRef);
      expect(KEDA.bearerParameters).toContain(ref.parameter);
    }
  });

  it("point the metrics-api scaler at the group's endpoint, whose JSON has a number at the value location", () => {
    const trigger = triggers.find((t) => t.type === 'metrics-api')!;
    const metadata = trigger.metadata as Doc;
    expect(metadata.authMode).toBe('bearer');
    expect(metadata.url).toMatch(/\/lag\/billing$/);
    const answer = JSON.parse(JSON.stringify(groupLag(status))) as unknown;
    expect(typeof valueAt(answer, metadata.valueLocation as string)).toBe('number');
    expect(valueAt(answer, metadata.valueLocation as string)).toBe(120);
  });

  it('query, in the prometheus scaler and the HPA, a series the exporter writes, with its label', async () => {
    const registry = new Registry();
    const admin = { groups: () => Promise.resolve([status]) } as unknown as EventrailAdmin;
    registerLagMetrics(admin, { registry });
    const series = parseExposition(await registry.metrics());
    const exported = (name: string, labels: Doc): boolean =>
      series.some((s) => s.name === name && Object.entries(labels).every(([key, value]) => s.labels[key] === value));

    const query = (triggers.find((t) => t.type === 'prometheus')!.metadata as Doc).query as string;
    const [, name, label, value] = /^max\((\w+)\{(\w+)="([^"]+)"\}\)$/.exec(query) ?? [];
    expect(exported(name, { [label]: value })).toBe(true);

    const hpa = docs.find((d) => d.kind === 'HorizontalPodAutoscaler')!.spec as Doc;
    keysWithin('HPA.spec', hpa, HPA.spec);
    keysWithin('HPA.scaleTargetRef', hpa.scaleTargetRef, HPA.scaleTargetRef);
    expect(hpa.maxReplicas).toBe(PARTITIONS);
    for (const metric of hpa.metrics as Doc[]) {
      keysWithin('HPA metric', metric, HPA.metric);
      const external = metric.external as Doc;
      keysWithin('HPA external', external, HPA.external);
      keysWithin('HPA metric identifier', external.metric, HPA.metricIdentifier);
      keysWithin('HPA target', external.target, HPA.target);
      const identifier = external.metric as { name: string; selector: { matchLabels: Doc } };
      expect(exported(identifier.name, identifier.selector.matchLabels)).toBe(true);
    }
  });
});
