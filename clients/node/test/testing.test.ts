// testing.drain (the due jobs of some queues run inline, through the SQL calls) and
// testing.enqueued (the jobs waiting in a queue), against the real server.
import { after, before, describe, test } from 'node:test';
import * as assert from 'node:assert/strict';
import { Pool, type Client } from 'pg';
import * as jobq from 'jobq';
import { testing } from 'jobq';
import { ADMIN_DSN, DSN, connect, one, queueName } from './helpers';

let app: Client;
let admin: Client;
let pool: Pool;

before(async () => {
  app = await connect(DSN);
  admin = await connect(ADMIN_DSN);
  pool = new Pool({ connectionString: DSN, max: 4 });
});
after(async () => {
  await app.end();
  await admin.end();
  await pool.end();
});

async function jobRow(id: string): Promise<Record<string, unknown>> {
  const { rows } = await admin.query('SELECT * FROM jobq.jobs WHERE id = $1', [id]);
  assert.equal(rows.length, 1, `job ${id} exists`);
  return rows[0] as Record<string, unknown>;
}

/** Registrations of the drain's worker still in jobq.workers. */
async function drainWorkers(): Promise<number> {
  return one<number>(admin, "SELECT count(*)::int FROM jobq.workers WHERE name = 'jobq.testing.drain'");
}

class PaymentDeclined extends Error {}

describe('testing.drain', () => {
  test('completes, fails and discards each job as a worker would', async () => {
    const q = queueName('drain');
    const ok = (await jobq.enqueue(app, q, { n: 2 }, { kind: 'double' }))!;
    const boom = (await jobq.enqueue(app, q, { n: 3 }, { kind: 'boom' }))!;
    const last = (await jobq.enqueue(app, q, { n: 4 }, { kind: 'boom', maxAttempts: 1 }))!;
    const orphan = (await jobq.enqueue(app, q, {}, { kind: 'nobody' }))!;
    const plain = (await jobq.enqueue(app, q, { n: 5 }))!; // no kind: routed by its queue

    const drained = await testing.drain(app, {
      queues: [q],
      handlers: {
        double: (job) => ({ n: (job.payload as { n: number }).n * 2 }),
        boom: async (job) => { throw new PaymentDeclined(`bad ${(job.payload as { n: number }).n}`); },
        [q]: () => undefined,
      },
    });

    assert.deepEqual(drained.jobs.map((d) => d.job.id), [ok, boom, last, orphan, plain]);
    assert.deepEqual(drained.jobs.map((d) => d.state), ['completed', 'ready', 'dead', 'dead', 'completed']);
    assert.deepEqual(drained.completed.map((d) => d.job.id), [ok, plain]);
    assert.deepEqual(drained.failed.map((d) => d.job.id), [boom, last, orphan]);
    assert.deepEqual(drained.jobs[0]!.result, { n: 4 });
    assert.equal(drained.jobs[0]!.error, null);
    assert.equal(drained.jobs[0]!.job.attempt, 1);
    assert.deepEqual(drained.jobs[1]!.error, { type: 'PaymentDeclined', message: 'bad 3' });
    assert.ok(drained.jobs[1]!.thrown instanceof PaymentDeclined);
    assert.deepEqual(drained.jobs[3]!.error, { type: 'NoHandler', message: 'jobq: no handler for kind "nobody"' });
    assert.equal(drained.jobs[4]!.result, null);

    // The server holds the same story: the calls were jobq_complete and jobq_fail.
    assert.deepEqual((await jobRow(ok))['result'], { n: 4 });
    const retried = await jobRow(boom);
    assert.equal(retried['state'], 'ready');
    assert.ok((retried['run_at'] as Date) > new Date());
    assert.deepEqual(retried['last_error'], { type: 'PaymentDeclined', message: 'bad 3' });
    assert.equal((await jobRow(orphan))['attempt'], 1);
    assert.equal((await jobRow(plain))['result'], null); // undefined is stored as NULL
    assert.equal(await drainWorkers(), 0);
  });

  test('a job a handler enqueues is drained in the same call', async () => {
    const q = queueName('follow');
    const first = (await jobq.enqueue(pool, q, { step: 1 }, { kind: 'step' }))!;
    const drained = await testing.drain(pool, {
      queues: [q],
      handlers: {
        step: async (job) => {
          const { step } = job.payload as { step: number };
          if (step < 3) await jobq.enqueue(pool, q, { step: step + 1 }, { kind: 'step' });
          return step;
        },
      },
    });
    assert.deepEqual(drained.jobs.map((d) => d.result), [1, 2, 3]);
    assert.equal(drained.jobs[0]!.job.id, first);
    assert.ok(drained.jobs.every((d) => d.state === 'completed'));
    assert.deepEqual(await testing.enqueued(pool, q), []);
    assert.equal(await drainWorkers(), 0);
  });

  test('maxJobs stops a runaway drain and gives the next job back', async () => {
    const q = queueName('runaway');
    await jobq.enqueue(app, q, { n: 0 }, { kind: 'again' });
    const again = async (job: jobq.JobContext) => {
      await jobq.enqueue(pool, q, { n: (job.payload as { n: number }).n + 1 }, { kind: 'again' });
    };
    const error = await testing.drain(app, { queues: [q], handlers: { again }, maxJobs: 4 }).then(
      () => assert.fail('drain should have stopped'), (e: unknown) => e);
    assert.ok(error instanceof testing.DrainLimitReached);
    assert.equal(error.maxJobs, 4);
    assert.deepEqual(error.drained.jobs.map((d) => (d.job.payload as { n: number }).n), [0, 1, 2, 3]);
    // The fifth was checked out but not run: unregistering gave it back, its attempt uncounted.
    const [waiting, ...more] = await testing.enqueued(app, q);
    assert.equal(more.length, 0);
    assert.deepEqual(waiting!.payload, { n: 4 });
    assert.equal(waiting!.attempt, 0);
    assert.equal((await jobRow(waiting!.id))['interrupted_at'], null);
    assert.equal(await drainWorkers(), 0);
    await assert.rejects(testing.drain(app, { queues: [q], handlers: { again }, maxJobs: 0 }), RangeError);
    await assert.rejects(testing.drain(app, { queues: [], handlers: { again } }), TypeError);
  });

  test('jobs not due are left alone, and retryIn is reported', async () => {
    const q = queueName('retry');
    const later = (await jobq.enqueue(app, q, { later: true }, { kind: 'mail', runAt: new Date(Date.now() + 3_600_000) }))!;
    const now = (await jobq.enqueue(app, q, { later: false }, { kind: 'mail' }))!;
    const drained = await testing.drain(app, { queues: [q], handlers: { mail: () => jobq.retryIn(600_000, 'the API is busy') } });
    assert.equal(drained.jobs.length, 1); // the retry is due in 10 minutes: not again in this drain
    const [only] = drained.jobs;
    assert.equal(only!.job.id, now);
    assert.equal(only!.state, 'ready');
    assert.deepEqual(only!.error, { type: 'RetryIn', message: 'the API is busy' });
    assert.ok(((await jobRow(now))['run_at'] as Date).getTime() > Date.now() + 540_000);
    assert.equal((await jobRow(later))['attempt'], 0);
  });

  test('a result that is not JSON fails the job', async () => {
    const q = queueName('odd');
    await jobq.enqueue(app, q, {}, { kind: 'odd' });
    const [d] = (await testing.drain(app, { queues: [q], handlers: { odd: () => ({ big: 1n }) } })).jobs;
    assert.equal(d!.state, 'ready');
    assert.equal(d!.error!.type, 'TypeError');
  });

  test('inside BEGIN it drains uncommitted jobs, and a rollback undoes everything', async () => {
    const q = queueName('tx');
    const db = await pool.connect();
    try {
      await db.query('BEGIN');
      await jobq.enqueue(db, q, { order: 7 }, { kind: 'charge' });
      const drained = await testing.drain(db, {
        queues: [q],
        handlers: {
          charge: async (job) => {
            // The same client, between the drain's calls: the follow-up joins the transaction.
            await jobq.enqueue(db, q, job.payload, { kind: 'receipt' });
            return { charged: true };
          },
          receipt: () => 'sent',
        },
      });
      assert.deepEqual(drained.jobs.map((d) => [d.job.kind, d.state]), [['charge', 'completed'], ['receipt', 'completed']]);
      // Nothing is committed: another session sees neither the jobs nor the drain's worker.
      assert.equal(await one<number>(admin, 'SELECT count(*)::int FROM jobq.jobs WHERE queue = $1', [q]), 0);
      await db.query('ROLLBACK');
      assert.equal(await one<number>(db, 'SELECT count(*)::int FROM jobq.jobs WHERE queue = $1', [q]), 0);
    } finally {
      db.release();
    }
    assert.equal(await drainWorkers(), 0);
  });

  test('durable() throws in a drained handler, which fails the job', async () => {
    const q = queueName('durable');
    await jobq.enqueue(app, q, {}, { kind: 'order' });
    const [d] = (await testing.drain(app, { queues: [q], handlers: { order: (job) => job.durable() } })).jobs;
    assert.equal(d!.state, 'ready');
    assert.match(d!.error!.message, /durable steps need a job run by a Worker/);
  });
});

describe('testing.enqueued', () => {
  test('filters by kind and by payload containment', async () => {
    const q = queueName('enqueued');
    const mail = (await jobq.enqueue(app, q, { to: 'ada@example.com', lang: 'en' }, { kind: 'welcome', priority: 3 }))!;
    const other = (await jobq.enqueue(app, q, { to: 'bob@example.com', lang: 'en' }, { kind: 'welcome' }))!;
    const later = (await jobq.enqueue(app, q, { to: 'ada@example.com' }, { kind: 'reminder', runAt: new Date(Date.now() + 86_400_000) }))!;
    const child = (await jobq.enqueue(app, q, { after: mail }, { kind: 'audit', dependsOn: [mail] }))!;
    await jobq.enqueue(app, `${q}-other`, { to: 'ada@example.com' }, { kind: 'welcome' });

    const ids = async (filter?: testing.EnqueuedFilter) => (await testing.enqueued(app, q, filter)).map((j) => j.id);
    assert.deepEqual(await ids(), [mail, other, later, child]);
    assert.deepEqual(await ids({ kind: 'welcome' }), [mail, other]);
    assert.deepEqual(await ids({ payload: { to: 'ada@example.com' } }), [mail, later]);
    assert.deepEqual(await ids({ kind: 'welcome', payload: { to: 'eve@example.com' } }), []);
    const [found] = await testing.enqueued(app, q, { kind: 'welcome', payload: { to: 'ada@example.com' } });
    assert.deepEqual(
      [found!.id, found!.queue, found!.kind, found!.payload, found!.priority, found!.state, found!.scheduled, found!.attempt, found!.maxAttempts],
      [mail, q, 'welcome', { to: 'ada@example.com', lang: 'en' }, 3, 'ready', false, 0, 25]);
    const [reminder] = await testing.enqueued(app, q, { kind: 'reminder' });
    assert.equal(reminder!.scheduled, true);
    const [audit] = await testing.enqueued(app, q, { kind: 'audit' });
    assert.equal(audit!.state, 'blocked');
    assert.deepEqual(audit!.dependsOn, [mail]);

    // Drained jobs are no longer waiting; the child, ready once its parent completed, is
    // drained in the same call; the scheduled one stays.
    const drained = await testing.drain(app, { queues: [q], handlers: { welcome: () => null, audit: () => null } });
    assert.deepEqual(drained.jobs.map((d) => d.job.id), [other, mail, child]); // priority 0 before 3
    assert.deepEqual(await ids(), [later]);
  });

  test('sees what the caller\'s transaction enqueued', async () => {
    const q = queueName('enqueued-tx');
    const db = await pool.connect();
    try {
      await db.query('BEGIN');
      const id = await jobq.enqueue(db, q, { x: 1 }, { kind: 'k' });
      assert.deepEqual((await testing.enqueued(db, q, { kind: 'k' })).map((j) => j.id), [id]);
      assert.deepEqual(await testing.enqueued(app, q), []); // not committed: other sessions see nothing
      await db.query('ROLLBACK');
    } finally {
      db.release();
    }
  });
});

describe('testing.makeJob', () => {
  test('builds a job to call a handler with', async () => {
    const welcome = async (job: jobq.JobContext) => {
      job.signal.throwIfAborted();
      return { to: (job.payload as { to: string }).to, attempt: job.attempt };
    };
    const job = testing.makeJob('mail', { to: 'ada@example.com' }, { kind: 'welcome', attempt: 3 });
    assert.deepEqual([job.id, job.queue, job.kind, job.priority, job.maxAttempts, job.checkpoints], ['0', 'mail', 'welcome', 0, 25, {}]);
    assert.deepEqual(await welcome(job), { to: 'ada@example.com', attempt: 3 });
    const controller = new AbortController();
    const stopping = testing.makeJob('mail', { to: 'ada@example.com' }, { signal: controller.signal });
    controller.abort(new jobq.Cancelled('0')); // a handler that stops when its job is cancelled
    await assert.rejects(welcome(stopping), jobq.Cancelled);
    assert.deepEqual(testing.makeJob('q').payload, {});
    assert.throws(() => testing.makeJob('q').durable(), /durable steps need a job run by a Worker/);
  });
});
