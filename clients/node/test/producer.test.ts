// The producer and operator calls, each against the real server: what they send is what
// the server stores, and what they return is what the server answered.
import { after, before, describe, test } from 'node:test';
import * as assert from 'node:assert/strict';
import { Pool, type Client } from 'pg';
import * as jobq from 'jobq';
import { ADMIN_DSN, DSN, connect, one, queueName, waitFor } from './helpers';

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

async function jobRow(id: string): Promise<Record<string, unknown>> {
  const { rows } = await admin.query('SELECT * FROM jobq.jobs WHERE id = $1', [id]);
  assert.equal(rows.length, 1, `job ${id} exists`);
  return rows[0] as Record<string, unknown>;
}

describe('transactions', () => {
  test('a job enqueued in a transaction that rolls back never runs, one committed does', async () => {
    const q = queueName('tx');
    const pool = new Pool({ connectionString: DSN, max: 2 });
    const tx = await pool.connect();
    let rolledBack: string | null;
    let committed: string | null;
    try {
      await tx.query('BEGIN');
      rolledBack = await jobq.enqueue(tx, q, { which: 'rolled back' });
      await tx.query('ROLLBACK');
      await tx.query('BEGIN');
      committed = await jobq.enqueue(tx, q, { which: 'committed' });
      await tx.query('COMMIT');
    } finally {
      tx.release();
    }
    assert.ok(rolledBack && committed);
    const seen: unknown[] = [];
    const worker = new jobq.Worker(DSN, { queues: [q], concurrency: 2, handleSignals: false, log: () => {} });
    worker.handle(q, (job) => { seen.push(job.payload); return { ran: job.id }; });
    const running = worker.run();
    try {
      await waitFor('the committed job to complete',
        async () => (await one<string>(admin, 'SELECT state FROM jobq.jobs WHERE id = $1', [committed])) === 'completed');
    } finally {
      await worker.stop();
      await running;
      await pool.end();
    }
    assert.deepEqual(seen, [{ which: 'committed' }]);
    assert.equal(await one<number>(admin, 'SELECT count(*)::int FROM jobq.jobs WHERE id = $1', [rolledBack]), 0);
    assert.equal(await one<number>(admin, 'SELECT count(*)::int FROM jobq.jobs WHERE queue = $1', [q]), 1);
    assert.deepEqual((await jobRow(committed))['result'], { ran: committed });
  });

  test('a pg.Pool is a queryable too', async () => {
    const pool = new Pool({ connectionString: DSN, max: 1 });
    try {
      const id = await jobq.enqueue(pool, queueName('pool'), [1, 'two', { three: 3 }]);
      assert.ok(id);
      assert.deepEqual((await jobRow(id))['payload'], [1, 'two', { three: 3 }]);
    } finally {
      await pool.end();
    }
  });
});

describe('enqueue', () => {
  test('sends each option it is given, as the named argument it stands for', async () => {
    const q = queueName('opts');
    const runAt = new Date(Date.now() + 3_600_000);
    const id = await jobq.enqueue(app, q, { to: 'a@example.com' }, {
      kind: 'welcome', priority: -3, runAt, maxAttempts: 4, uniqueKey: `${q}:u`,
      uniqueStrategy: 'until_executing', onConflict: 'reject', concurrencyKey: `${q}:c`,
      concurrencyLimit: 2, rateKey: `${q}:r`, fairnessKey: 'tenant-7',
    });
    assert.ok(id);
    const row = await jobRow(id);
    assert.equal(row['queue'], q);
    assert.deepEqual(row['payload'], { to: 'a@example.com' });
    assert.equal(row['kind'], 'welcome');
    assert.equal(row['priority'], -3);
    assert.equal((row['run_at'] as Date).getTime(), runAt.getTime());
    assert.equal(row['max_attempts'], 4);
    assert.equal(row['unique_key'], `${q}:u`);
    assert.equal(row['unique_strategy'], 'until_executing');
    assert.equal(row['concurrency_key'], `${q}:c`);
    assert.equal(row['concurrency_limit'], 2);
    assert.equal(row['rate_key'], `${q}:r`);
    assert.equal(row['fairness_key'], 'tenant-7');
    assert.equal(row['state'], 'ready');
  });

  test('leaves the server its defaults for what it is not given', async () => {
    const id = await jobq.enqueue(app, queueName('defaults'));
    assert.ok(id);
    const row = await jobRow(id);
    assert.deepEqual(row['payload'], {});
    assert.equal(row['kind'], null);
    assert.equal(row['priority'], 0);
    assert.equal(row['max_attempts'], 25);
    assert.equal(row['unique_key'], null);
    assert.equal(row['concurrency_key'], null);
  });

  test('onConflict: discard answers null, replace updates the waiting job', async () => {
    const q = queueName('conflict');
    const key = `${q}:k`;
    const first = await jobq.enqueue(app, q, { v: 1 }, { uniqueKey: key });
    assert.equal(await jobq.enqueue(app, q, { v: 2 }, { uniqueKey: key, onConflict: 'discard' }), null);
    assert.equal(await jobq.enqueue(app, q, { v: 3 }, { uniqueKey: key, onConflict: 'replace', priority: 7 }), first);
    const row = await jobRow(first!);
    assert.deepEqual(row['payload'], { v: 3 });
    assert.equal(row['priority'], 7);
  });

  test('enqueueBatch returns the ids in payload order, with the options given', async () => {
    const q = queueName('batch');
    const ids = await jobq.enqueueBatch(app, q, [{ n: 1 }, { n: 2 }, ['three']], { kind: 'bulk', priority: 2, maxAttempts: 3 });
    assert.equal(ids.length, 3);
    const { rows } = await admin.query('SELECT id, payload, kind, priority, max_attempts FROM jobq.jobs WHERE queue = $1 ORDER BY id', [q]);
    assert.deepEqual(rows.map((r) => r.id), ids);
    assert.deepEqual(rows.map((r) => r.payload), [{ n: 1 }, { n: 2 }, ['three']]);
    assert.ok(rows.every((r) => r.kind === 'bulk' && r.priority === 2 && r.max_attempts === 3));
    assert.deepEqual(await jobq.enqueueBatch(app, q, []), []);
  });
});

describe('operator calls', () => {
  test('cancel and retry', async () => {
    const q = queueName('cancel');
    const id = (await jobq.enqueue(app, q))!;
    assert.equal(await jobq.cancel(app, id), 'cancelled');
    assert.equal(await jobq.cancel(app, BigInt(id)), 'cancelled');
    assert.equal(await jobq.cancel(app, -1), null);
    assert.equal(await jobq.retry(app, id), true);
    assert.equal((await jobRow(id))['state'], 'ready');
    assert.equal(await jobq.retry(app, id), false);
  });

  test('pause and resume, for a queue and for a kind', async () => {
    const q = queueName('pause');
    const worker = await jobq.registerWorker(app, { name: 'pause-test' });
    try {
      await jobq.enqueue(app, q, { n: 1 }, { kind: 'k1' });
      await jobq.pause(admin, q);
      assert.deepEqual(await jobq.checkout(app, worker, { queues: [q] }), []);
      await jobq.resume(admin, q);
      await jobq.pause(admin, q, 'k1');
      assert.deepEqual(await jobq.checkout(app, worker, { queues: [q] }), []);
      await jobq.resume(admin, q, 'k1');
      const jobs = await jobq.checkout(app, worker, { queues: [q] });
      assert.equal(jobs.length, 1);
      assert.equal(jobs[0]!.kind, 'k1');
    } finally {
      await jobq.unregisterWorker(app, worker);
    }
  });

  test('schedule and unschedule', async () => {
    const name = queueName('sched');
    await jobq.schedule(admin, name, '*/5 * * * * *', name, { tick: true }, { kind: 'tick', timeZone: 'Europe/Paris', catchUp: true });
    const { rows } = await admin.query('SELECT cron, time_zone, queue, kind, next_run_at FROM jobq.schedules WHERE name = $1', [name]);
    assert.equal(rows.length, 1);
    assert.equal(rows[0].cron, '*/5 * * * * *');
    assert.equal(rows[0].time_zone, 'Europe/Paris');
    assert.equal(rows[0].queue, name);
    assert.equal(rows[0].kind, 'tick');
    assert.ok(rows[0].next_run_at instanceof Date);
    assert.equal(await jobq.unschedule(admin, name), true);
    assert.equal(await jobq.unschedule(admin, name), false);
  });

  test('a rate limit lets one start per window, and null removes it', async () => {
    const q = queueName('rate');
    const key = `${q}:r`;
    await jobq.setRateLimit(admin, key, 1, '1 hour');
    const worker = await jobq.registerWorker(app);
    try {
      await jobq.enqueueBatch(app, q, [{}, {}]);
      // enqueueBatch has no rate key: these two start freely; the keyed ones are limited.
      await jobq.enqueue(app, q, { limited: 1 }, { rateKey: key });
      await jobq.enqueue(app, q, { limited: 2 }, { rateKey: key });
      const jobs = await jobq.checkout(app, worker, { queues: [q], maxJobs: 10 });
      assert.equal(jobs.length, 3);
      assert.equal(jobs.filter((j) => (j.payload as { limited?: number }).limited).length, 1);
      await jobq.setRateLimit(admin, key, null, null);
      assert.equal((await jobq.checkout(app, worker, { queues: [q], maxJobs: 10 })).length, 1);
    } finally {
      await jobq.unregisterWorker(app, worker);
    }
  });

  test('named locks', async () => {
    const key = queueName('lock');
    const w1 = await jobq.registerWorker(app, { name: 'lock-1' });
    const w2 = await jobq.registerWorker(app, { name: 'lock-2' });
    try {
      assert.equal(await jobq.acquireLock(app, key, w1, { ttl: 60_000 }), true);
      assert.equal(await jobq.lockHolder(app, key), w1);
      assert.equal(await jobq.acquireLock(app, key, w2), false);
      assert.equal(await jobq.acquireLock(app, key, w1, { ttl: '2 minutes' }), true);
      assert.equal(await jobq.releaseLock(app, key, w2), false);
      assert.equal(await jobq.releaseLock(app, key, w1), true);
      assert.equal(await jobq.lockHolder(app, key), null);
    } finally {
      await jobq.unregisterWorker(app, w1);
      await jobq.unregisterWorker(app, w2);
    }
  });

  test('reap returns the counts of its pass', async () => {
    // A worker dies holding two jobs and a lock, and a pass reaps it in the transaction that
    // aged its heartbeat, out of sight of the background worker's passes; the pass before it
    // takes any other dead worker, so that the counts are this worker's alone.
    const q = queueName('reap');
    const worker = await jobq.registerWorker(app);
    const ids = await jobq.enqueueBatch(app, q, [{}, {}]);
    const held = await jobq.checkout(app, worker, { queues: [q], maxJobs: 2 });
    assert.deepEqual(held.map((j) => j.id).sort(), ids.sort());
    assert.equal(await jobq.acquireLock(app, q, worker), true);
    let r: jobq.ReapResult;
    await admin.query('BEGIN');
    try {
      await jobq.reap(admin);
      await admin.query("UPDATE jobq.workers SET heartbeat_at = now() - interval '1 hour' WHERE id = $1", [worker]);
      r = await jobq.reap(admin);
    } finally {
      await admin.query('COMMIT');
    }
    assert.deepEqual(r, { workersReaped: 1, jobsRequeued: 2, jobsDead: 0, locksReleased: 1, jobsPruned: 0 });
  });

  test('queueStats', async () => {
    const q = queueName('stats');
    await jobq.enqueueBatch(app, q, [{}, {}]);
    await jobq.enqueue(app, q, {}, { runAt: new Date(Date.now() + 3_600_000) });
    const [s] = await jobq.queueStats(app, q);
    assert.ok(s);
    assert.equal(s.queue, q);
    assert.equal(s.ready, 2);
    assert.equal(s.scheduled, 1);
    assert.equal(s.executing, 0);
    assert.equal(s.dead, 0);
    assert.equal(typeof s.oldestReadyAgeMs, 'number');
    assert.ok(s.oldestReadyAgeMs! >= 0);
    assert.ok((await jobq.queueStats(app)).some((row) => row.queue === q));
  });
});

describe('worker calls', () => {
  test('register, checkout, heartbeat with holding, complete, fail, unregister', async () => {
    const q = queueName('calls');
    const worker = await jobq.registerWorker(app, { name: 'calls', metadata: { v: 2 } });
    assert.deepEqual(await one(admin, 'SELECT metadata FROM jobq.workers WHERE id = $1', [worker]), { v: 2 });
    const ids = await jobq.enqueueBatch(app, q, [{ n: 1 }, { n: 2 }, { n: 3 }], { maxAttempts: 3 });
    const jobs = await jobq.checkout(app, worker, { queues: [q], maxJobs: 3 });
    assert.deepEqual(jobs.map((j) => j.id), ids);
    const j = jobs[0]!;
    assert.equal(j.queue, q);
    assert.equal(j.attempt, 1);
    assert.equal(j.maxAttempts, 3);
    assert.ok(j.runAt instanceof Date && j.enqueuedAt instanceof Date);
    assert.equal(j.interruptedAt, null);
    assert.equal(j.lastError, null);
    // The third job's checkout "never reached the worker": holding leaves it out.
    assert.deepEqual(await jobq.heartbeat(app, worker, [ids[0]!, ids[1]!]), []);
    assert.equal((await jobRow(ids[2]!))['state'], 'ready');
    assert.equal(await jobq.complete(app, ids[0]!, worker, { ok: true }), true);
    assert.equal(await jobq.complete(app, ids[0]!, worker), false);
    assert.equal(await jobq.fail(app, ids[1]!, worker, { error: { message: 'no' }, discard: true }), 'dead');
    assert.deepEqual((await jobRow(ids[0]!))['result'], { ok: true });
    assert.deepEqual((await jobRow(ids[1]!))['last_error'], { message: 'no' });
    const again = await jobq.checkout(app, worker, { queues: [q], wait: 1000 });
    assert.deepEqual(again.map((x) => x.id), [ids[2]]);
    assert.ok(again[0]!.interruptedAt instanceof Date);
    assert.equal(await jobq.unregisterWorker(app, worker), 1);
    assert.equal((await jobRow(ids[2]!))['state'], 'ready');
  });

  test('a waiting checkout waits inside the server and returns empty when nothing comes', async () => {
    const worker = await jobq.registerWorker(app);
    try {
      const t0 = Date.now();
      assert.deepEqual(await jobq.checkout(app, worker, { queues: [queueName('empty')], wait: 300 }), []);
      assert.ok(Date.now() - t0 >= 250, 'the call waited');
    } finally {
      await jobq.unregisterWorker(app, worker);
    }
  });

  test('fail with retryIn and discard', async () => {
    const q = queueName('fail');
    const worker = await jobq.registerWorker(app);
    try {
      const [a, b] = await jobq.enqueueBatch(app, q, [{}, {}]);
      await jobq.checkout(app, worker, { queues: [q], maxJobs: 2 });
      assert.equal(await jobq.fail(app, a!, worker, { error: { m: 'later' }, retryIn: '10 minutes' }), 'ready');
      assert.equal(await jobq.fail(app, b!, worker, { discard: true }), 'dead');
      const later = await one<number>(admin, 'SELECT extract(epoch FROM run_at - clock_timestamp())::float8 FROM jobq.jobs WHERE id = $1', [a]);
      assert.ok(later > 590 && later <= 600, `run_at is 10 minutes away (${later} s)`);
    } finally {
      await jobq.unregisterWorker(app, worker);
    }
  });

  test('completeMany, failMany and the fused calls', async () => {
    const q = queueName('many');
    const worker = await jobq.registerWorker(app);
    try {
      const ids = await jobq.enqueueBatch(app, q, [{ n: 1 }, { n: 2 }, { n: 3 }, { n: 4 }, { n: 5 }, { n: 6 }], { maxAttempts: 1 });
      let hand = await jobq.completeAndCheckout(app, worker, [], { queues: [q], maxJobs: 2 });
      assert.deepEqual(hand.map((j) => j.id), ids.slice(0, 2));
      hand = await jobq.completeAndCheckout(app, worker, hand.map((j) => j.id), { results: [{ r: 1 }, undefined], queues: [q], maxJobs: 2 });
      assert.deepEqual(hand.map((j) => j.id), ids.slice(2, 4));
      hand = await jobq.failAndCheckout(app, worker, hand.map((j) => j.id), { errors: [{ e: 3 }, { e: 4 }], queues: [q], maxJobs: 2 });
      assert.deepEqual(hand.map((j) => j.id), ids.slice(4, 6));
      assert.deepEqual(await jobq.completeMany(app, worker, [ids[4]!, ids[0]!], [{ r: 5 }, null]), [ids[4]]);
      assert.deepEqual(await jobq.failMany(app, worker, [ids[5]!, ids[1]!], [{ e: 6 }, { e: 2 }]), ['dead', null]);
      const { rows } = await admin.query('SELECT state, result, last_error FROM jobq.jobs WHERE queue = $1 ORDER BY id', [q]);
      assert.deepEqual(rows, [
        { state: 'completed', result: { r: 1 }, last_error: null },
        { state: 'completed', result: null, last_error: null },
        { state: 'dead', result: null, last_error: { e: 3 } },
        { state: 'dead', result: null, last_error: { e: 4 } },
        { state: 'completed', result: { r: 5 }, last_error: null },
        { state: 'dead', result: null, last_error: { e: 6 } },
      ]);
    } finally {
      await jobq.unregisterWorker(app, worker);
    }
  });
});
