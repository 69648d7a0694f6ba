// The Worker in this process: concurrency, results and errors, retry delays, cancellation,
// routing, re-registration after JQ001, and pooled mode through PgBouncer.
import { after, before, test } from 'node:test';
import * as assert from 'node:assert/strict';
import type { Client } from 'pg';
import * as jobq from 'jobq';
import * as fs from 'node:fs';
import { ADMIN_DSN, DSN, EDITION, POOLER_DSN, SERVER_LOG, WAITING_EVENTS, connect, one, queueName, waitFor } from './helpers';

let app: Client;
let admin: Client;

before(async () => {
  app = await connect(DSN);
  admin = await connect(ADMIN_DSN);
});
after(async () => {
  await app.end();
  await admin.end();
});

/** Runs `worker` while `body` runs, then stops it and checks that run() resolved. */
async function withWorker(worker: jobq.Worker, body: () => Promise<void>): Promise<void> {
  const running = worker.run();
  let failed = false;
  try {
    await body();
  } catch (e) {
    failed = true;
    throw e;
  } finally {
    await worker.stop();
    if (failed) await running.catch(() => {});
    else await running;
  }
}

function states(queue: string): Promise<Record<string, unknown>[]> {
  return admin.query('SELECT id, state, attempt, result, last_error, worker_id FROM jobq.jobs WHERE queue = $1 ORDER BY id', [queue])
    .then((r) => r.rows as Record<string, unknown>[]);
}

async function allFinished(queue: string, n: number): Promise<Record<string, unknown>[] | undefined> {
  const rows = await states(queue);
  return rows.length === n && rows.every((r) => ['completed', 'dead', 'cancelled'].includes(r['state'] as string)) ? rows : undefined;
}

test('N handlers are in flight at once in one process', async () => {
  const q = queueName('overlap');
  const n = 5;
  let active = 0;
  let peak = 0;
  let arrived = 0;
  let openLatch!: () => void;
  const latch = new Promise<void>((resolve) => { openLatch = resolve; });
  const worker = new jobq.Worker(DSN, { queues: [q], concurrency: n, handleSignals: false, log: () => {} });
  worker.handle(q, async (job) => {
    active += 1;
    peak = Math.max(peak, active);
    arrived += 1;
    if (arrived === n) openLatch();
    // Every handler waits here until all n have arrived: only n at once get through.
    const timeout = new Promise((_, reject) => setTimeout(() => reject(new Error('latch not reached')), 10_000).unref());
    await Promise.race([latch, timeout]);
    active -= 1;
    return { n: (job.payload as { n: number }).n };
  });
  await withWorker(worker, async () => {
    await jobq.enqueueBatch(app, q, Array.from({ length: n }, (_, i) => ({ n: i })));
    const rows = await waitFor('every job to finish', () => allFinished(q, n));
    assert.deepEqual(rows.map((r) => r['state']), Array(n).fill('completed'));
    assert.deepEqual(rows.map((r) => r['result']), Array.from({ length: n }, (_, i) => ({ n: i })));
  });
  assert.equal(peak, n);
});

test('a result is stored, an error is stored with its type and message, a missing handler discards', async () => {
  const q = queueName('outcomes');
  class PaymentDeclined extends Error {}
  const worker = new jobq.Worker(DSN, { queues: [q], concurrency: 4, handleSignals: false, log: () => {} });
  worker.handle('ok', (job) => ({ echoed: job.payload, attempt: job.attempt, kind: job.kind, queue: job.queue }));
  worker.handle('boom', () => { throw new PaymentDeclined('card 4242 declined'); });
  worker.handle(q, () => 'routed by queue');
  await withWorker(worker, async () => {
    const ok = await jobq.enqueue(app, q, { a: 1 }, { kind: 'ok' });
    const boom = await jobq.enqueue(app, q, {}, { kind: 'boom', maxAttempts: 1 });
    const byQueue = await jobq.enqueue(app, q);
    const orphan = await jobq.enqueue(app, q, {}, { kind: 'nobody-handles-this' });
    const rows = await waitFor('every job to finish', () => allFinished(q, 4));
    const byId = new Map(rows.map((r) => [r['id'], r]));
    assert.equal(byId.get(ok)!['state'], 'completed');
    assert.deepEqual(byId.get(ok)!['result'], { echoed: { a: 1 }, attempt: 1, kind: 'ok', queue: q });
    assert.equal(byId.get(boom)!['state'], 'dead');
    assert.deepEqual(byId.get(boom)!['last_error'], { type: 'PaymentDeclined', message: 'card 4242 declined' });
    assert.equal(byId.get(byQueue)!['state'], 'completed');
    assert.equal(byId.get(byQueue)!['result'], 'routed by queue');
    // No handler: dead at once, though 25 attempts were allowed.
    assert.equal(byId.get(orphan)!['state'], 'dead');
    assert.equal(byId.get(orphan)!['attempt'], 1);
    assert.equal((byId.get(orphan)!['last_error'] as { type: string }).type, 'NoHandler');
  });
});

test('a retry delay asked by the handler is honoured', async () => {
  const q = queueName('retry');
  const delayMs = 3000; // the default backoff after attempt 1 is 2 s +- 25 %: at most 2.5 s
  const worker = new jobq.Worker(DSN, { queues: [q], concurrency: 2, handleSignals: false, log: () => {} });
  worker.handle('thrown', (job) => {
    if (job.attempt === 1) throw jobq.retryIn(delayMs, 'upstream busy');
    return { attempt: job.attempt, lastError: job.lastError };
  });
  worker.handle('returned', (job) => (job.attempt === 1 ? jobq.retryIn(delayMs) : { attempt: job.attempt }));
  await withWorker(worker, async () => {
    const thrown = await jobq.enqueue(app, q, {}, { kind: 'thrown' });
    const returned = await jobq.enqueue(app, q, {}, { kind: 'returned' });
    const rows = await waitFor('both jobs to complete on their second attempt', () => allFinished(q, 2), 20_000);
    assert.deepEqual(rows.map((r) => r['state']), ['completed', 'completed']);
    assert.deepEqual(rows.find((r) => r['id'] === thrown)!['result'],
      { attempt: 2, lastError: { type: 'RetryIn', message: 'upstream busy' } });
    assert.deepEqual(rows.find((r) => r['id'] === returned)!['result'], { attempt: 2 });
    for (const id of [thrown, returned]) {
      // The failure set the job due the delay asked for after it (both times are the server's
      // clock at the failure), not the default backoff; the second attempt started no sooner.
      const row = (await admin.query(
        `SELECT extract(epoch FROM run_at - (errors->0->>'at')::timestamptz)::float8 * 1000 AS delay,
                started_at >= run_at AS after
           FROM jobq.jobs WHERE id = $1`, [id])).rows[0];
      assert.deepEqual(row, { delay: delayMs, after: true }, `job ${id}`);
    }
  });
});

test('heartbeats every third of the server\'s heartbeat_timeout keep a long job alive', async () => {
  const q = queueName('heartbeat');
  const timeoutMs = await one<number>(admin, "SELECT (extract(epoch FROM current_setting('jobq.heartbeat_timeout')::interval) * 1000)::float8");
  let running = false;
  const worker = new jobq.Worker(DSN, { queues: [q], concurrency: 1, handleSignals: false, log: () => {} });
  worker.handle(q, async () => {
    running = true;
    // The job lasts longer than the heartbeat timeout; nothing but heartbeats keeps the
    // worker alive meanwhile (it has no free slot, so no checkout waits).
    await new Promise((resolve) => setTimeout(resolve, timeoutMs + 1000));
    return 'survived';
  });
  await withWorker(worker, async () => {
    const id = await jobq.enqueue(app, q);
    const wid = await waitFor('the worker to register', async () => worker.id ?? undefined);
    await waitFor('the handler to start', async () => running);
    const beats: number[] = [];
    await waitFor('the job to finish', async () => {
      const { rows } = await admin.query(
        'SELECT (SELECT state FROM jobq.jobs WHERE id = $1) AS state, (SELECT heartbeat_at FROM jobq.workers WHERE id = $2) AS at',
        [id, wid]);
      const at = (rows[0].at as Date | null)?.getTime();
      if (at !== undefined && beats[beats.length - 1] !== at) beats.push(at);
      return rows[0].state !== 'executing' ? rows[0].state : undefined;
    }, timeoutMs * 3);
    const row = (await admin.query('SELECT state, attempt, interrupted_at, result FROM jobq.jobs WHERE id = $1', [id])).rows[0];
    assert.deepEqual(row, { state: 'completed', attempt: 1, interrupted_at: null, result: 'survived' });
    const gaps = beats.slice(1).map((t, i) => t - beats[i]!);
    assert.ok(gaps.length >= 2, `heartbeats seen while the job ran: ${beats.length}`);
    // Each heartbeat came before the last one expired (the job's survival above is the
    // guarantee; this names the gap that would have broken it).
    assert.ok(gaps.every((g) => g < timeoutMs), `heartbeat gaps ${gaps.join(', ')} ms, timeout ${timeoutMs} ms`);
  });
});

test('JQ002 from the fused call: the job finished elsewhere is dropped, the others are completed alone', async () => {
  const q = queueName('jq002');
  const events: jobq.WorkerEvent[] = [];
  let arrived = 0;
  let release!: () => void;
  const both = new Promise<void>((resolve) => { release = resolve; });
  const worker = new jobq.Worker(DSN, { queues: [q], concurrency: 2, handleSignals: false, log: (e) => events.push(e) });
  worker.handle(q, async (job) => {
    arrived += 1;
    if ((job.payload as { finishedElsewhere?: boolean }).finishedElsewhere) {
      await waitFor('both handlers to run', async () => arrived === 2);
      // An operator (the superuser may act on any worker) completes this job meanwhile.
      assert.equal(await jobq.complete(admin, job.id, job.workerId, { by: 'operator' }), true);
      release();
    }
    await both;
    return { by: 'handler' };
  });
  await withWorker(worker, async () => {
    const [elsewhere, normal] = await jobq.enqueueBatch(app, q, [{ finishedElsewhere: true }, {}]);
    const rows = await waitFor('both jobs to finish', () => allFinished(q, 2));
    assert.deepEqual(rows.map((r) => [r['id'], r['state'], r['result']]),
      [[elsewhere, 'completed', { by: 'operator' }], [normal, 'completed', { by: 'handler' }]]);
    assert.ok(events.some((e) => e.event === 'lost' && e['id'] === elsewhere), 'the refused completion is reported as lost');
    assert.ok(events.some((e) => e.event === 'completed' && e['id'] === normal));
  });
});

test('a cancel reaches the running handler through its signal, and the job ends cancelled', async () => {
  const q = queueName('cancel');
  let reason: unknown;
  const started = new Set<string>();
  const worker = new jobq.Worker(DSN, { queues: [q], concurrency: 2, handleSignals: false, log: () => {} });
  worker.handle(q, (job) => new Promise((_, reject) => {
    started.add(job.id);
    job.signal.addEventListener('abort', () => {
      reason = job.signal.reason;
      reject(job.signal.reason);
    });
  }));
  await withWorker(worker, async () => {
    const id = (await jobq.enqueue(app, q))!;
    await waitFor('the handler to start', async () => started.has(id));
    assert.equal(await jobq.cancel(app, id), 'executing');
    await waitFor('the job to be cancelled',
      async () => (await one<string>(admin, 'SELECT state FROM jobq.jobs WHERE id = $1', [id])) === 'cancelled');
    assert.ok(reason instanceof jobq.Cancelled);
    assert.equal(reason.jobId, id);
    assert.equal((await one<{ type: string }>(admin, 'SELECT last_error FROM jobq.jobs WHERE id = $1', [id])).type, 'Cancelled');
  });
});

test('a reaped worker drops what it held unreported, registers again, and the jobs run again', async () => {
  const q = queueName('reaped');
  const events: jobq.WorkerEvent[] = [];
  const reasons: unknown[] = [];
  let firstId: string | null = null;
  const worker = new jobq.Worker(DSN, { queues: [q], concurrency: 2, handleSignals: false, log: (e) => events.push(e) });
  worker.handle(q, async (job) => {
    if (job.workerId !== firstId) return { run: 'second' };
    // The first registration's runs wait until their signal aborts, then return a result
    // that must never be reported.
    await new Promise((resolve) => job.signal.addEventListener('abort', resolve));
    reasons.push(job.signal.reason);
    return { run: 'first' };
  });
  await withWorker(worker, async () => {
    firstId = await waitFor('the worker to register', async () => worker.id ?? undefined);
    await jobq.enqueueBatch(app, q, [{}, {}]);
    await waitFor('both jobs to run under the first registration', async () =>
      (await one<number>(admin, "SELECT count(*)::int FROM jobq.jobs WHERE queue = $1 AND state = 'executing' AND worker_id = $2", [q, firstId])) === 2);
    // An operator removes the worker: its jobs go back to ready, its next call gets JQ001.
    assert.equal(await one<number>(admin, 'SELECT jobq_unregister_worker($1)', [firstId]), 2);
    const rows = await waitFor('both jobs to complete', () => allFinished(q, 2));
    const secondId = worker.id;
    assert.ok(secondId && secondId !== firstId, 'registered again under a new id');
    for (const r of rows) {
      assert.equal(r['state'], 'completed');
      assert.deepEqual(r['result'], { run: 'second' });
      assert.equal(r['worker_id'], secondId);
    }
    assert.equal(reasons.length, 2);
    assert.ok(reasons.every((r) => r instanceof jobq.WorkerLost));
    assert.ok(events.some((e) => e.event === 'reaped' && e.workerId === firstId));
    assert.ok(events.some((e) => e.event === 'reregistered' && e.workerId === secondId));
    assert.equal(events.filter((e) => e.event === 'dropped').length, 2);
    assert.equal(await one<number>(admin, 'SELECT count(*)::int FROM jobq.workers WHERE id = $1', [firstId]), 0);
  });
});

test('a lost connection: the worker reconnects, registers again and goes on', async () => {
  const q = queueName('reconnect');
  const name = queueName('reconnecting-worker');
  const events: jobq.WorkerEvent[] = [];
  const worker = new jobq.Worker(DSN, { queues: [q], name, concurrency: 2, handleSignals: false, log: (e) => events.push(e) });
  worker.handle(q, () => 'after the reconnect');
  await withWorker(worker, async () => {
    const firstId = await waitFor('the worker to register', async () => worker.id ?? undefined);
    await waitFor('its checkout to wait', async () =>
      (await one<number>(admin, "SELECT count(*)::int FROM pg_stat_activity WHERE application_name = $1 AND query LIKE '%jobq_checkout%' AND state = 'active'", [name])) === 1);
    const { rows } = await admin.query('SELECT pg_terminate_backend(pid) AS ok FROM pg_stat_activity WHERE application_name = $1', [name]);
    assert.deepEqual(rows, [{ ok: true }]);
    await waitFor('the connection loss to be noticed', async () => events.some((e) => e.event === 'disconnected'));
    const id = await jobq.enqueue(app, q);
    const secondId = await waitFor('a new registration', async () => (worker.id && worker.id !== firstId ? worker.id : undefined));
    await waitFor('the job to complete',
      async () => (await one<string>(admin, 'SELECT state FROM jobq.jobs WHERE id = $1', [id])) === 'completed');
    assert.equal(await one(admin, 'SELECT worker_id FROM jobq.jobs WHERE id = $1', [id]), secondId);
    const gone = async (): Promise<boolean> => (await one<number>(admin, 'SELECT count(*)::int FROM jobq.workers WHERE id = $1', [firstId])) === 0;
    if (EDITION === 'sql') {
      // The SQL edition finds a bound worker whose session ended dead at the next pass, not at
      // once (docs/sql-edition.md, "Bound workers"): here the pass a heartbeat of the new
      // registration runs.
      await waitFor('the bound registration to be reaped at the next pass', gone);
    } else {
      assert.ok(await gone(), 'the bound registration died with its session');
    }
  });
});

/** The pid of the worker `name`'s main connection once it waits inside the server. */
function waitingPid(name: string): Promise<number> {
  return waitFor('the worker to wait inside the server', async () => {
    const { rows } = await admin.query(
      "SELECT pid FROM pg_stat_activity WHERE application_name = $1 AND state = 'active' AND wait_event = ANY($2)",
      [name, WAITING_EVENTS]);
    return rows.length === 1 ? (rows[0].pid as number) : undefined;
  });
}

test('a stop ends the waiting checkout without an error on the server', async () => {
  // jobq_stop_checkouts, not a cancel: nothing the worker's session did is logged as an error.
  // (The wait is longer than the test's deadline: a worker whose wait ran out instead fails.)
  const q = queueName('idle');
  const name = `idle-${q}`.slice(0, 60);
  const offset = fs.statSync(SERVER_LOG).size;
  const worker = new jobq.Worker(DSN, { name, queues: [q], waitMs: 120_000, handleSignals: false, log: () => {} });
  worker.handle(q, async () => null);
  const running = worker.run();
  const pid = await waitingPid(name);
  await Promise.race([
    worker.stop().then(() => running),
    new Promise((_, reject) => setTimeout(() => reject(new Error('the stop did not end the wait')), 20_000)),
  ]);
  const written = fs.readFileSync(SERVER_LOG).subarray(offset).toString();
  // The default log_line_prefix names the backend's pid: "... [pid] ERROR: ...".
  const mine = written.split('\n').filter((l) => l.includes(`[${pid}]`));
  assert.deepEqual(mine.filter((l) => l.includes('ERROR') || l.includes('canceling statement')), []);
});

test('a job committed as the worker stops is never started', async () => {
  // A stop and a job's commit at the same moment, many times: whichever reaches the server
  // first, the job is not started; it is left ready, its attempt not counted.
  const q = queueName('stopping');
  for (let round = 0; round < 12; round += 1) {
    const name = `stopping-${round}-${q}`.slice(0, 60);
    const ran: string[] = [];
    const worker = new jobq.Worker(DSN, { name, queues: [q], waitMs: 120_000, handleSignals: false, log: () => {} });
    worker.handle(q, async (job) => { ran.push(job.id); return null; });
    const running = worker.run();
    await waitingPid(name);
    const stopped = worker.stop();
    const id = await jobq.enqueue(app, q, { round });
    await stopped;
    await running;
    assert.deepEqual(ran, [], `round ${round}: the stopping worker started a job`);
    const row = (await admin.query('SELECT state, attempt, interrupted_at FROM jobq.jobs WHERE id = $1', [id])).rows[0];
    assert.deepEqual(row, { state: 'ready', attempt: 0, interrupted_at: null }, `round ${round}`);
    assert.equal(await jobq.cancel(app, id!), 'cancelled');
  }
});

test('pooled mode runs jobs through PgBouncer in transaction mode', async () => {
  const q = queueName('pooled');
  const n = 30;
  const worker = new jobq.Worker(POOLER_DSN, { queues: [q], concurrency: 4, pooled: true, waitMs: 1000, handleSignals: false, log: () => {} });
  worker.handle(q, async (job) => {
    await new Promise((resolve) => setTimeout(resolve, 5));
    return { n: (job.payload as { n: number }).n * 2 };
  });
  await withWorker(worker, async () => {
    const wid = await waitFor('the worker to register', async () => worker.id ?? undefined);
    // Registered without bind_to_session: no backend is recorded.
    assert.equal(await one(admin, 'SELECT backend_pid FROM jobq.workers WHERE id = $1', [wid]), null);
    await jobq.enqueueBatch(app, q, Array.from({ length: n }, (_, i) => ({ n: i })));
    const rows = await waitFor('every job to finish', () => allFinished(q, n));
    assert.deepEqual(rows.map((r) => r['state']), Array(n).fill('completed'));
    assert.deepEqual(rows.map((r) => r['result']), Array.from({ length: n }, (_, i) => ({ n: i * 2 })));
    assert.ok(rows.every((r) => r['worker_id'] === wid));
  });
  assert.equal(worker.id, null, 'unregistered after stop');
});

test('a claim whose reply never reached the idle worker goes back to ready while the worker lives on', async () => {
  const q = queueName('holding');
  const other = queueName('holding-other');
  const worker = new jobq.Worker(DSN, { queues: [q], concurrency: 4, waitMs: 1000, handleSignals: false, log: () => {} });
  worker.handle(q, () => 'after the stray claim');
  await withWorker(worker, async () => {
    const wid = await waitFor('the worker to register', async () => worker.id ?? undefined);
    // A job of a queue the worker does not take, claimed for it by the superuser: a checkout
    // whose reply the worker never received.
    const stray = await jobq.enqueue(admin, other);
    const { rows: claimed } = await admin.query('SELECT id FROM jobq_checkout($1::uuid, ARRAY[$2::text])', [wid, other]);
    assert.deepEqual(claimed.map((r) => String(r.id)), [String(stray)]);
    assert.equal(await one(admin, 'SELECT worker_id FROM jobq.jobs WHERE id = $1', [stray]), wid);
    // The worker idles in waiting checkouts meanwhile; its `holding` must still reach the server.
    const row = await waitFor('the stray claim to go back to ready', async () => {
      const { rows } = await admin.query('SELECT state, interrupted_at FROM jobq.jobs WHERE id = $1', [stray]);
      return rows[0].state === 'ready' ? rows[0] as Record<string, unknown> : undefined;
    }, 10_000);
    assert.ok(row['interrupted_at'] instanceof Date, 'interrupted_at is set');
    assert.equal(worker.id, wid, 'the same registration lives on');
    const id = await jobq.enqueue(app, q);
    await waitFor('a job of its own queue to complete afterwards',
      async () => (await one<string>(admin, 'SELECT state FROM jobq.jobs WHERE id = $1', [id])) === 'completed');
    assert.equal(await one(admin, 'SELECT result FROM jobq.jobs WHERE id = $1', [id]), 'after the stray claim');
  });
});

test('a dead worker\'s job comes back to a running worker, with nobody calling jobq_reap()', async () => {
  // The SQL edition has no background worker: the passes that reap dead workers are run by
  // the workers' heartbeats (at least every jobq.reap_interval there), so a database whose
  // only activity is this library's worker is served. On the extension its background worker
  // reaps too: the same holds in both editions.
  const q = queueName('served');
  // A second worker, registered in SQL and not bound to its session, takes a job of the queue
  // and dies: it never beats again.
  const doomed = await jobq.registerWorker(app, { name: 'doomed', bindToSession: false });
  const id = await jobq.enqueue(app, q, { n: 1 });
  assert.deepEqual((await jobq.checkout(app, doomed, { queues: [q] })).map((j) => j.id), [id]);
  const worker = new jobq.Worker(DSN, { queues: [q], concurrency: 2, handleSignals: false, log: () => {} });
  worker.handle(q, (job) => ({ attempt: job.attempt }));
  await withWorker(worker, async () => {
    const wid = await waitFor('the worker to register', async () => worker.id ?? undefined);
    assert.equal(worker.serverEdition, EDITION);
    // Once jobq.heartbeat_timeout (3 s) has passed, a pass reaps the dead worker and requeues
    // its job, which the running worker then takes and completes.
    await waitFor('the job to complete', async () =>
      (await one<string>(admin, 'SELECT state FROM jobq.jobs WHERE id = $1', [id])) === 'completed', 20_000);
    const row = (await admin.query('SELECT result, worker_id, interrupted_at IS NOT NULL AS interrupted FROM jobq.jobs WHERE id = $1', [id])).rows[0];
    assert.deepEqual(row, { result: { attempt: 2 }, worker_id: wid, interrupted: true });
    assert.equal(await one<number>(admin, 'SELECT count(*)::int FROM jobq.workers WHERE id = $1', [doomed]), 0);
  });
});
