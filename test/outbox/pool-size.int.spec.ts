import { Pool } from 'pg';
import { InvalidOptionError } from '../../lib';
import { EventrailOutbox, pgConnector } from '../../lib/outbox';
import { uniquePrefix } from '../support/helpers';
import { createOutboxApp, uniqueTables } from '../support/outbox';
import { PostgresServer, startPostgres } from '../support/postgres';

/** The relay holds one client of the pool for as long as it is active: a pool of one would leave publish none. */
describe('outbox on a small pool', () => {
  let server: PostgresServer;
  let url: string;

  beforeAll(async () => {
    server = await startPostgres();
    url = await server.createDatabase();
  });
  afterAll(async () => {
    await server?.stop();
  });

  jest.setTimeout(60_000);

  it('refuses at startup a relay on a pool of max 1, and accepts it without the relay', async () => {
    const pool = new Pool({ connectionString: url, max: 1 });
    try {
      const refused = createOutboxApp(
        { prefix: uniquePrefix('pool'), autoStart: false },
        { connector: pgConnector(pool), ...uniqueTables() },
      );
      await expect(refused).rejects.toThrow(InvalidOptionError);
      await expect(refused).rejects.toThrow(/outbox\.connector.*max of 2 or more/);
      const app = await createOutboxApp(
        { prefix: uniquePrefix('pool'), autoStart: false },
        { connector: pgConnector(pool), ...uniqueTables(), relay: { enabled: false } },
      );
      const client = await pool.connect();
      try {
        await client.query('begin');
        await app.get(EventrailOutbox).publish(client, 'a', { n: 1 });
        await client.query('commit');
      } finally {
        client.release();
      }
      await app.close();
    } finally {
      await pool.end();
    }
  });
});
