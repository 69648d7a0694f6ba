// The workflow calls, against the real server: dependencies, results, events, checkpoints,
// snooze and awaits, fenced as completion is.
import { after, before, describe, test } from 'node:test';
import * as assert from 'node:assert/strict';
import { type Client } from 'pg';
import * as jobq from 'jobq';
import { ADMIN_DSN, DSN, connect, queueName, waitFor } from './helpers';

let app: Client;

before(async () => {
  app = await connect(DSN);
});
after(async () => {
  await app.end();
});

describe('workflows', () => {
  test('dependencies, checkpoints, events, snooze, awaits and results', async () => {
    const q = queueName('wf');
    const parent = (await jobq.enqueue(app, q, { n: 1 }))!;
    const child = (await jobq.enqueue(app, q, { n: 2 }, { dependsOn: [parent], onParentFailure: 'run' }))!;
    const w = await jobq.registerWorker(app, { name: 'wf' });
    const [job] = await jobq.checkout(app, w, { queues: [q], maxJobs: 10 });
    assert.equal(job!.id, parent);
    assert.deepEqual(job!.checkpoints, {});
    assert.equal(job!.dependsOn, null);
    assert.equal(await jobq.checkpoint(app, parent, w, 'one', { x: 1 }), true);
    assert.equal(await jobq.awaitEvent(app, parent, w, `${q}:ev`), 'waiting');
    assert.equal(await jobq.emitEvent(app, `${q}:ev`, { p: 1 }), 1);
    assert.equal(await jobq.emitEvent(app, `${q}:ev`, { p: 2 }), 0);
    const [again] = await jobq.checkout(app, w, { queues: [q], maxJobs: 10 });
    assert.equal(again!.id, parent);
    assert.equal(again!.attempt, 1, 'the suspended attempt did not count');
    assert.deepEqual(again!.checkpoints['one'], { x: 1 });
    assert.deepEqual((again!.checkpoints[`event:${q}:ev`] as { payload: unknown }).payload, { p: 1 });
    assert.equal(await jobq.snooze(app, parent, w, new Date(Date.now() - 1000)), true);
    const [third] = await jobq.checkout(app, w, { queues: [q], maxJobs: 10 });
    assert.equal(third!.id, parent);
    assert.equal(await jobq.awaitJobs(app, parent, w, []), 'finished');
    assert.equal(await jobq.complete(app, parent, w, 'done'), true);
    const [kid] = await jobq.checkout(app, w, { queues: [q], maxJobs: 10 });
    assert.equal(kid!.id, child);
    assert.deepEqual(kid!.dependsOn, [parent]);
    const [r] = await jobq.results(app, [parent]);
    assert.deepEqual(r, { id: parent, kind: null, state: 'completed', attempt: 1, result: 'done', lastError: null });
    // Fenced as completion: another worker changes nothing.
    const other = await jobq.registerWorker(app, { name: 'other' });
    assert.equal(await jobq.checkpoint(app, child, other, 'x', 1), false);
    assert.equal(await jobq.awaitEvent(app, child, other, 'e'), null);
    await assert.rejects(jobq.enqueue(app, q, {}, { dependsOn: ['987654321'] }), jobq.InvalidArgument);
  });
});

describe('graphs', () => {
  test('a graph in one call', async () => {
    const q = queueName('graph');
    const ids = await jobq.enqueueGraph(app, [{ queue: q, kind: 'a' }, { queue: q, kind: 'b', after: [0] }]);
    assert.equal(ids.length, 2);
    const rows = await jobq.results(app, ids.map((i) => i!));
    assert.deepEqual(rows.map((r) => r.state), ['ready', 'blocked']);
    await assert.rejects(jobq.enqueueGraph(app, [{ queue: q, after: [0] }]), jobq.InvalidArgument);
  });
});

describe('durable steps', () => {
  test('a workflow of steps, a sleep, fan-out and gather, and an event, replayed across suspensions', async () => {
    const q = queueName('durable');
    const kids = `${q}-kids`;
    let charged = 0;
    const worker = new jobq.Worker(DSN, { queues: [q, kids], concurrency: 4, handleSignals: false, log: () => {} });
    worker.handle('kid', (job) => (job.payload as { n: number }).n * 10);
    worker.handle('order', async (job) => {
      const steps = job.durable();
      const charge = await steps.step('charge', () => { charged += 1; return 'ch_1'; });
      await steps.sleep('cool-off', 200);
      const ids = await steps.spawn('ship', kids, [0, 1, 2].map((n) => ({ n })), { kind: 'kid' });
      const shipped = await steps.gather(ids);
      const delivered = await steps.awaitEvent(`${q}:delivered`);
      return { charge, shipped: shipped.map((r) => r.result), delivered };
    });
    const running = worker.run();
    try {
      const id = (await jobq.enqueue(app, q, {}, { kind: 'order' }))!;
      const admin = await connect(ADMIN_DSN);
      try {
        await waitFor('the order to await its event', async () => {
          const { rows } = await admin.query('SELECT 1 FROM jobq.blocked WHERE job_id = $1 AND event IS NOT NULL', [id]);
          return rows.length === 1;
        });
        assert.equal(await jobq.emitEvent(app, `${q}:delivered`, { by: 'van' }), 1);
        const row = await waitFor('the order to complete', async () => {
          const { rows } = await admin.query("SELECT result, attempt FROM jobq.jobs WHERE id = $1 AND state = 'completed'", [id]);
          return rows[0] as { result: unknown; attempt: number } | undefined;
        });
        assert.deepEqual(row.result, { charge: 'ch_1', shipped: [0, 10, 20], delivered: { by: 'van' } });
        assert.equal(row.attempt, 1, 'suspensions did not count as attempts');
        assert.equal(charged, 1, 'the step ran once across the replays');
        const { rows } = await admin.query("SELECT count(*)::int AS n FROM jobq.jobs WHERE queue = $1", [kids]);
        assert.equal(rows[0].n, 3, 'spawned once');
      } finally {
        await admin.end();
      }
    } finally {
      worker.stop();
      await running;
    }
  });
});
