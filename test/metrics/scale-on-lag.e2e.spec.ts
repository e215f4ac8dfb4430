import { INestApplication, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { EventrailDashboardModule, EventrailModule, GroupLag } from '../../lib';
import { E2eWorld } from '../support/e2e-harness';
import { testRedisUrl } from '../support/helpers';
import { E2E_EVENT, type WorkerProcess } from '../support/processes';

// The loop KEDA runs, played by the test against real worker processes: poll the lag endpoint, compute the
// replicas its metrics-api scaler would ask for, start or stop (SIGTERM, as a scale-in does) worker processes.

const PARTITIONS = 2;
const TOKEN = 'keda-token-for-tests';
/** The ScaledObject of the recipe: targetValue, activationTargetValue, minReplicaCount 0, maxReplicaCount = partitions. */
const TARGET = 10;
const ACTIVATION = 0;
const MAX_REPLICAS = PARTITIONS;
/** KEDA's pollingInterval, shortened: the scaler looks again after this, whatever it saw. */
const POLL_MS = 100;
const EVENTS = 60;

/** Replicas KEDA asks for: 0 while not active (backlog at or below the activation value), else the HPA's ceil(value / target), at least 1, at most the maximum. */
function kedaReplicas(backlog: number): number {
  if (backlog <= ACTIVATION) return 0;
  return Math.min(MAX_REPLICAS, Math.max(1, Math.ceil(backlog / TARGET)));
}

describe('scaling a group on its lag, as KEDA would', () => {
  const world = new E2eWorld('scale', PARTITIONS, 'scaled');
  let exporter: INestApplication | undefined;

  beforeAll(() => world.start());
  afterAll(async () => {
    await exporter?.close();
    await world.stop();
  });

  /** An app with the module, no handler and the dashboard API behind a token: what the scaler polls. */
  async function startExporter(): Promise<string> {
    @Module({
      imports: [
        EventrailModule.forRoot({ redis: testRedisUrl(), prefix: world.prefix, partitions: PARTITIONS }),
        EventrailDashboardModule.register({ auth: { token: TOKEN } }),
      ],
    })
    class ExporterModule {}
    exporter = await NestFactory.create(ExporterModule, { logger: false });
    await exporter.listen(0, '127.0.0.1');
    return `http://127.0.0.1:${(exporter.getHttpServer().address() as { port: number }).port}/eventrail/api/lag/${world.group}`;
  }

  it('goes from 0 to 2 worker processes while there is a backlog, and back to 0 when there is none', async () => {
    // The group exists (one worker ran and left), and no worker of it runs now.
    const first = await world.fleet.spawn(world.worker({ name: 'first' }));
    first.signal('SIGTERM');
    await first.exited;

    const url = await startExporter();
    const poll = async (): Promise<GroupLag> => {
      const answer = await fetch(url, { headers: { authorization: `Bearer ${TOKEN}` } });
      if (answer.status !== 200) throw new Error(`GET ${url}: ${answer.status} ${await answer.text()}`);
      return (await answer.json()) as GroupLag;
    };
    expect(await poll()).toMatchObject({ backlog: 0, members: 0 });
    expect(kedaReplicas((await poll()).backlog)).toBe(0);

    await world.publish(Array.from({ length: EVENTS }, (_, seq) => ({ event: E2E_EVENT, data: { seq }, key: `k-${seq}` })));
    // With no worker running, one poll gives the exact backlog.
    const before = await poll();
    expect(before).toMatchObject({ lag: EVENTS, backlog: EVENTS, members: 0, usefulWorkers: 2, partitions: PARTITIONS });

    const running: WorkerProcess[] = [];
    const replicas: number[] = [0];
    const seen: Array<{ backlog: number; members: number }> = [];
    const deadline = Date.now() + 120_000;
    let started = 0;
    for (;;) {
      const lag = await poll();
      seen.push({ backlog: lag.backlog, members: lag.members });
      const wanted = kedaReplicas(lag.backlog);
      if (wanted > running.length) {
        const configs = Array.from({ length: wanted - running.length }, () => world.worker({ name: `w${++started}`, delayMs: 100 }));
        running.push(...(await world.fleet.spawnAll(configs)));
        replicas.push(running.length);
      } else if (wanted < running.length) {
        // Scale-in: Kubernetes sends SIGTERM; the worker hands its partitions over in its graceful shutdown.
        const leaving = running.splice(wanted);
        for (const worker of leaving) worker.signal('SIGTERM');
        const exits = await Promise.all(leaving.map((worker) => worker.exited));
        // Nest's shutdown hooks run, then raise the signal again: a graceful exit ends by SIGTERM, not SIGKILL.
        expect(exits.map((exit) => exit.signal ?? exit.code)).toEqual(leaving.map(() => 'SIGTERM'));
        replicas.push(running.length);
      }
      const handled = new Set(world.fleet.handled.map((h) => h.seq));
      if (handled.size === EVENTS && running.length === 0) break;
      if (Date.now() > deadline)
        throw new Error(`no end after 120 s: replicas ${replicas.join(' -> ')}, handled ${handled.size}, last ${JSON.stringify(lag)}`);
      await new Promise((resolve) => setTimeout(resolve, POLL_MS));
    }

    expect(replicas[1]).toBe(2); // from zero straight to the partition count
    expect(Math.max(...replicas)).toBe(MAX_REPLICAS);
    expect(replicas[replicas.length - 1]).toBe(0);
    // The graceful leave took the members out at once: the endpoint says so without waiting for a heartbeat TTL.
    expect(await poll()).toMatchObject({ lag: 0, backlog: 0, members: 0, usefulWorkers: 0 });
    expect(seen.some((s) => s.members === 2)).toBe(true);
    console.log(
      `replicas ${replicas.join(' -> ')} over ${seen.length} polls; ${world.fleet.handled.length} deliveries of ${EVENTS} events`,
    );
    await world.fleet.killAll();
    expect(world.fleet.workers.every((worker) => worker.hasExited)).toBe(true);
  });
});
