// Worker processes (test/fixtures/worker-proc.ts) run by the OS: exactly once under eight
// of them, a SIGKILLed one's jobs finishing elsewhere, and SIGTERM draining.
import { after, before, test } from 'node:test';
import * as assert from 'node:assert/strict';
import type { Client } from 'pg';
import * as jobq from 'jobq';
import { ADMIN_DSN, DSN, connect, ensureTables, one, queueName, spawnWorker, waitFor, type WorkerProcess } from './helpers';

let app: Client;
let admin: Client;
const started: WorkerProcess[] = [];

before(async () => {
  app = await connect(DSN);
  admin = await connect(ADMIN_DSN);
  await ensureTables(admin);
});
after(async () => {
  for (const w of started) if (w.proc.exitCode === null && w.proc.signalCode === null) w.proc.kill('SIGKILL');
  await app.end();
  await admin.end();
});

function worker(queue: string, options: { concurrency?: number } = {}): WorkerProcess {
  const w = spawnWorker(queue, options);
  started.push(w);
  return w;
}

function registered(w: WorkerProcess): Promise<string> {
  return w.event((e) => e.event === 'registered', 'registration').then((e) => e.workerId!);
}

test('eight worker processes complete every job exactly once', async () => {
  const q = queueName('eight');
  const n = 300;
  const workers = Array.from({ length: 8 }, () => worker(q, { concurrency: 4 }));
  const ids = await Promise.all(workers.map(registered));
  assert.equal(new Set(ids).size, 8);
  await jobq.enqueueBatch(app, q, Array.from({ length: n }, (_, i) => ({ n: i, sleepMs: 5 })));
  await waitFor('every job to complete', async () =>
    (await one<number>(admin, "SELECT count(*)::int FROM jobq.jobs WHERE queue = $1 AND state = 'completed'", [q])) === n, 60_000);
  for (const w of workers) w.proc.kill('SIGTERM');
  const exits = await Promise.all(workers.map((w) => w.exited));
  assert.deepEqual(exits, Array(8).fill({ code: 0, signal: null }));

  const runs = await admin.query(
    `SELECT count(*)::int AS runs, count(DISTINCT job_id)::int AS jobs, count(DISTINCT pid)::int AS pids,
            max(attempt) AS max_attempt
       FROM node_runs WHERE queue = $1`, [q]);
  assert.equal(runs.rows[0].runs, n, 'one handler run per job');
  assert.equal(runs.rows[0].jobs, n, 'every job ran');
  assert.equal(runs.rows[0].max_attempt, 1, 'no job needed a second attempt');
  assert.ok(runs.rows[0].pids >= 2, `the work was shared (${runs.rows[0].pids} processes ran jobs)`);
  // Each job's result names the process whose run of it was recorded.
  assert.equal(await one<number>(admin,
    `SELECT count(*)::int FROM jobq.jobs j JOIN node_runs r ON r.job_id = j.id
      WHERE j.queue = $1 AND (j.result->>'pid')::int = r.pid AND j.worker_id = r.worker_id`, [q]), n);
  assert.equal(await one<number>(admin, 'SELECT count(*)::int FROM jobq.workers WHERE id = ANY($1::uuid[])', [ids]), 0);
});

test("a SIGKILLed worker's jobs run again and complete on another worker", async () => {
  const q = queueName('sigkill');
  const victim = worker(q, { concurrency: 3 });
  const victimId = await registered(victim);
  const ids = await jobq.enqueueBatch(app, q, [{ hold: true }, { hold: true }, { hold: true }]);
  await waitFor('the victim to run all three', async () =>
    (await one<number>(admin, 'SELECT count(*)::int FROM node_runs WHERE queue = $1 AND worker_id = $2', [q, victimId])) === 3);
  victim.proc.kill('SIGKILL');
  assert.deepEqual(await victim.exited, { code: null, signal: 'SIGKILL' });
  await admin.query('INSERT INTO node_release (queue) VALUES ($1)', [q]);

  const rescuer = worker(q, { concurrency: 3 });
  const rescuerId = await registered(rescuer);
  const rows = await waitFor('the three jobs to complete', async () => {
    const { rows } = await admin.query(
      "SELECT id, worker_id, attempt, interrupted_at, result FROM jobq.jobs WHERE queue = $1 AND state = 'completed' ORDER BY id", [q]);
    return rows.length === 3 ? rows : undefined;
  });
  rescuer.proc.kill('SIGTERM');
  assert.deepEqual(await rescuer.exited, { code: 0, signal: null });
  assert.deepEqual(rows.map((r) => r.id), ids);
  for (const r of rows) {
    assert.equal(r.worker_id, rescuerId);
    assert.equal(r.attempt, 2);
    assert.ok(r.interrupted_at instanceof Date, 'the killed attempt was cut off by the reaper');
    assert.equal(r.result.pid, rescuer.proc.pid);
  }
  assert.equal(await one<number>(admin, 'SELECT count(*)::int FROM jobq.workers WHERE id = $1', [victimId]), 0);
});

test('SIGTERM drains: the jobs in flight complete, the worker unregisters, exit code 0', async () => {
  const q = queueName('sigterm');
  const w = worker(q, { concurrency: 8 });
  const wid = await registered(w);
  const ids = await jobq.enqueueBatch(app, q, [{ hold: true }, { hold: true }, { hold: true }, { hold: true }]);
  await waitFor('four handlers to run', async () =>
    (await one<number>(admin, 'SELECT count(*)::int FROM node_runs WHERE queue = $1', [q])) === 4);
  w.proc.kill('SIGTERM');
  const stopping = await w.event((e) => e.event === 'stopping', 'the worker to start stopping');
  assert.equal(stopping['inFlight'], 4);
  // Stopping takes no more work: a job enqueued now is never run here (a checkout that was
  // waiting may still claim it; unregistering gives it back, its attempt uncounted).
  const late = await jobq.enqueue(app, q, {});
  assert.equal(w.proc.exitCode, null, 'still draining while its jobs run');
  await admin.query('INSERT INTO node_release (queue) VALUES ($1)', [q]);
  assert.deepEqual(await w.exited, { code: 0, signal: null });

  const { rows } = await admin.query('SELECT id, state, result FROM jobq.jobs WHERE id = ANY($1::bigint[]) ORDER BY id', [ids]);
  assert.deepEqual(rows, ids.map((id) => ({ id, state: 'completed', result: { pid: w.proc.pid } })));
  assert.equal(await one<number>(admin, 'SELECT count(*)::int FROM jobq.workers WHERE id = $1', [wid]), 0);
  assert.ok(w.events.some((e) => e.event === 'unregistered'));
  const lateRow = (await admin.query('SELECT state, attempt FROM jobq.jobs WHERE id = $1', [late])).rows[0];
  assert.deepEqual(lateRow, { state: 'ready', attempt: 0 });
  assert.equal(await one<number>(admin, 'SELECT count(*)::int FROM node_runs WHERE job_id = $1', [late]), 0);
});
