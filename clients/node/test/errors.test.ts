// Every SQLSTATE the library maps, raised by the real server: the class, the code, and what
// the class carries.
import { after, before, test } from 'node:test';
import * as assert from 'node:assert/strict';
import type { Client } from 'pg';
import * as jobq from 'jobq';
import { ADMIN_DSN, DSN, connect, dsnAs, queueName } from './helpers';

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

/** The error `promise` rejects with, which must be an instance of `cls`. */
async function rejection<T extends Error>(promise: Promise<unknown>, cls: new (...args: never[]) => T): Promise<T> {
  try {
    await promise;
  } catch (e) {
    assert.ok(e instanceof cls, `expected ${cls.name}, got ${String(e)}`);
    assert.ok(e instanceof jobq.JobqError, 'every mapped error is a JobqError');
    return e;
  }
  assert.fail(`expected ${cls.name}, the call succeeded`);
}

test('23505 is UniqueConflict, with the id of the job holding the key', async () => {
  const q = queueName('unique');
  const first = await jobq.enqueue(app, q, {}, { uniqueKey: `${q}:k` });
  const e = await rejection(jobq.enqueue(app, q, {}, { uniqueKey: `${q}:k` }), jobq.UniqueConflict);
  assert.equal(e.sqlstate, '23505');
  assert.equal(e.existingJobId, first);
  assert.equal(e.lockWorkerId, null);
  assert.match(e.detail!, /existing job id/);
  assert.ok(e.cause, 'the driver error is kept as cause');
});

test('23505 for a key a named lock holds names the lock holder', async () => {
  const key = queueName('locked');
  const worker = await jobq.registerWorker(app);
  try {
    assert.equal(await jobq.acquireLock(app, key, worker), true);
    const e = await rejection(jobq.enqueue(app, key, {}, { uniqueKey: key }), jobq.UniqueConflict);
    assert.equal(e.existingJobId, null);
    assert.equal(e.lockWorkerId, worker);
  } finally {
    await jobq.unregisterWorker(app, worker);
  }
});

test('JQ001 is WorkerLost', async () => {
  const worker = await jobq.registerWorker(app);
  await jobq.unregisterWorker(admin, worker);
  for (const call of [() => jobq.heartbeat(app, worker), () => jobq.checkout(app, worker), () => jobq.unregisterWorker(app, worker)]) {
    const e = await rejection(call(), jobq.WorkerLost);
    assert.equal(e.sqlstate, 'JQ001');
  }
  // complete and fail fence instead of raising.
  assert.equal(await jobq.complete(app, 1, worker), false);
});

test('22023 and 22004 are InvalidArgument', async () => {
  const e1 = await rejection(jobq.enqueue(app, ''), jobq.InvalidArgument);
  assert.equal(e1.sqlstate, '22023');
  const e2 = await rejection(jobq.enqueue(app, queueName('bad'), {}, { maxAttempts: 0 }), jobq.InvalidArgument);
  assert.equal(e2.sqlstate, '22023');
  const e3 = await rejection(jobq.pause(admin, null), jobq.InvalidArgument);
  assert.equal(e3.sqlstate, '22004');
  const e4 = await rejection(jobq.enqueue(app, queueName('bad'), {}, { priority: null as unknown as number }), jobq.InvalidArgument);
  assert.equal(e4.sqlstate, '22004');
  const e5 = await rejection(jobq.schedule(admin, queueName('bad'), 'not cron', 'q'), jobq.InvalidArgument);
  assert.equal(e5.sqlstate, '22023');
});

test('42501 is PermissionDenied, for a role granted nothing and for another role\'s worker', async () => {
  const nobody = await connect(dsnAs(DSN, 'jobq_test_nobody'));
  const producer = await connect(dsnAs(DSN, 'jobq_test_producer'));
  try {
    const e1 = await rejection(jobq.enqueue(nobody, queueName('nobody')), jobq.PermissionDenied);
    assert.equal(e1.sqlstate, '42501');
    await rejection(jobq.queueStats(nobody), jobq.PermissionDenied);
    await rejection(jobq.registerWorker(producer), jobq.PermissionDenied);
    await rejection(jobq.pause(app, queueName('app')), jobq.PermissionDenied);
    const adminsWorker = await jobq.registerWorker(admin);
    try {
      await rejection(jobq.heartbeat(app, adminsWorker), jobq.PermissionDenied);
    } finally {
      await jobq.unregisterWorker(admin, adminsWorker);
    }
  } finally {
    await nobody.end();
    await producer.end();
  }
});

test('JQ002 and 40001 pass through as JobqError with their sqlstate', async () => {
  const worker = await jobq.registerWorker(app);
  try {
    const id = (await jobq.enqueue(app, queueName('jq002')))!;
    const e = await rejection(jobq.completeAndCheckout(app, worker, [id]), jobq.JobqError);
    assert.equal(e.constructor, jobq.JobqError);
    assert.equal(e.sqlstate, 'JQ002');
  } finally {
    await jobq.unregisterWorker(app, worker);
  }

  // An enqueue under REPEATABLE READ whose unique key another transaction committed after
  // the snapshot was taken.
  const q = queueName('serial');
  const other = await connect(DSN);
  try {
    await app.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
    await app.query('SELECT 1');
    await jobq.enqueue(other, q, {}, { uniqueKey: `${q}:k` });
    const e = await rejection(jobq.enqueue(app, q, {}, { uniqueKey: `${q}:k` }), jobq.JobqError);
    assert.equal(e.constructor, jobq.JobqError);
    assert.equal(e.sqlstate, '40001');
  } finally {
    await app.query('ROLLBACK');
    await other.end();
  }
});

test('retryIn makes a RetryIn; Cancelled names its job', () => {
  const r = jobq.retryIn(1500, 'busy');
  assert.ok(r instanceof jobq.RetryIn);
  assert.equal(r.delayMs, 1500);
  assert.equal(r.message, 'busy');
  const c = new jobq.Cancelled('42');
  assert.equal(c.jobId, '42');
  assert.equal(c.name, 'Cancelled');
});
