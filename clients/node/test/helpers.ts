// Shared by the test files: connections from the environment scripts/test-clients.sh sets,
// polling with a deadline, the tables the handlers record their runs in, and worker
// processes.
import { spawn, type ChildProcess } from 'node:child_process';
import * as path from 'node:path';
import * as readline from 'node:readline';
import { Client } from 'pg';
import type { WorkerEvent } from 'jobq';

function env(name: string): string {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set: run the suite with scripts/test-clients.sh node`);
  return value;
}

/** A worker's DSN (jobq_test_app, granted jobq_worker). */
export const DSN = env('JOBQ_TEST_DSN');
/** The superuser's DSN. */
export const ADMIN_DSN = env('JOBQ_TEST_ADMIN_DSN');
/** The server's log file (read to prove that a clean shutdown logs no error). */
export const SERVER_LOG = env('JOBQ_TEST_SERVER_LOG');
/** A worker's DSN through PgBouncer in transaction mode. */
export const POOLER_DSN = env('JOBQ_TEST_POOLER_DSN');
/**
 * The server's jobq: `extension`, or `sql` for the SQL edition (no background worker: the
 * workers' heartbeats run the passes).
 */
export const EDITION = process.env['JOBQ_TEST_EDITION'] || 'extension';
/**
 * What a waiting checkout waits on in pg_stat_activity.wait_event: the extension's latch, or in
 * the SQL edition the pg_sleep of the call that polls, or the advisory lock it holds, on which
 * the others sleep (docs/sql-edition.md, "Waiting checkout polls").
 */
export const WAITING_EVENTS: string[] = EDITION === 'sql' ? ['PgSleep', 'advisory'] : ['Extension'];

/** The DSN with another login role. */
export function dsnAs(dsn: string, user: string): string {
  const url = new URL(dsn);
  url.username = user;
  return url.toString();
}

/** A connected client; ended by the caller. */
export async function connect(dsn: string): Promise<Client> {
  const client = new Client({ connectionString: dsn });
  await client.connect();
  return client;
}

let counter = 0;
/** A queue name no other test uses. */
export function queueName(prefix: string): string {
  counter += 1;
  return `node-${prefix}-${process.pid}-${counter}-${Date.now()}`;
}

/**
 * Polls `probe` until it returns a value that is not undefined/false, or fails with
 * `what` after `timeoutMs`.
 */
export async function waitFor<T>(what: string, probe: () => Promise<T | undefined | false>, timeoutMs = 15_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value !== undefined && value !== false) return value;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
}

/** One column of the first row. */
export async function one<T>(db: Client, sql: string, values: unknown[] = []): Promise<T> {
  const { rows } = await db.query(sql, values);
  return Object.values(rows[0] as object)[0] as T;
}

/**
 * node_runs (one row per handler run: job, queue, pid, worker, attempt) and node_release (a
 * queue's held jobs finish once it has a row), writable by the worker role.
 */
export async function ensureTables(admin: Client): Promise<void> {
  await admin.query('BEGIN');
  await admin.query("SELECT pg_advisory_xact_lock(hashtext('jobq-node-tests'))");
  await admin.query(`CREATE TABLE IF NOT EXISTS node_runs (
      job_id bigint NOT NULL, queue text NOT NULL, pid integer NOT NULL, worker_id uuid NOT NULL,
      attempt integer NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp())`);
  await admin.query('CREATE TABLE IF NOT EXISTS node_release (queue text PRIMARY KEY)');
  await admin.query('GRANT SELECT, INSERT ON node_runs, node_release TO jobq_test_app');
  await admin.query('COMMIT');
}

/** A worker process running test/fixtures/worker-proc.ts, and the events it printed. */
export interface WorkerProcess {
  proc: ChildProcess;
  events: WorkerEvent[];
  /** The first event (seen or to come) that `match` accepts. */
  event(match: (e: WorkerEvent) => boolean, what: string, timeoutMs?: number): Promise<WorkerEvent>;
  /** Resolves with the exit code and signal. */
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

/** Starts a worker process on `queue` (see the fixture for `options`). */
export function spawnWorker(queue: string, options: { concurrency?: number; dsn?: string; pooled?: boolean } = {}): WorkerProcess {
  const proc = spawn(process.execPath, [path.join(__dirname, 'fixtures', 'worker-proc.js')], {
    env: {
      ...process.env,
      WORKER_DSN: options.dsn ?? DSN,
      WORKER_QUEUE: queue,
      WORKER_CONCURRENCY: String(options.concurrency ?? 4),
      WORKER_POOLED: options.pooled ? '1' : '0',
    },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const events: WorkerEvent[] = [];
  const waiters: { match: (e: WorkerEvent) => boolean; resolve: (e: WorkerEvent) => void }[] = [];
  readline.createInterface({ input: proc.stdout! }).on('line', (line) => {
    const e = JSON.parse(line) as WorkerEvent;
    events.push(e);
    for (const w of [...waiters]) {
      if (w.match(e)) {
        waiters.splice(waiters.indexOf(w), 1);
        w.resolve(e);
      }
    }
  });
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => {
    proc.on('exit', (code, signal) => resolve({ code, signal }));
  });
  return {
    proc,
    events,
    exited,
    event(match, what, timeoutMs = 15_000) {
      const seen = events.find(match);
      if (seen) return Promise.resolve(seen);
      return new Promise((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`timed out waiting for ${what}`)), timeoutMs);
        waiters.push({ match, resolve: (e) => { clearTimeout(timer); resolve(e); } });
        void exited.then(({ code, signal }) => {
          clearTimeout(timer);
          reject(new Error(`worker process exited (${code ?? signal}) before ${what}`));
        });
      });
    },
  };
}
