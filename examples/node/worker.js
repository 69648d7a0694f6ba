#!/usr/bin/env node
// A jobq worker in Node.js: the `jobq` library (clients/node) with the demo handler.
//
//   JOBQ_DSN=postgresql://jobq_demo_app@127.0.0.1:5499/jobq_demo node examples/node/worker.js
//
// The library does the protocol (heartbeats with what it holds, the one-commit
// complete-and-checkout, waiting inside the server, SIGTERM draining, re-registration,
// reconnection, pooled mode). The demo handler reads the payload: {"sleep_ms": N} sleeps N ms
// (a cancel cuts it short), {"fail": true} throws, anything else completes; the result is
// {"worker": <name>, "lang": "node"}. It handles the demo's kinds, and the queues of JOBQ_QUEUES
// for jobs without a kind. The "order" handler is a workflow of durable steps (job.durable()):
// charge, pack, three shipments fanned out and gathered, then a "delivered" event awaited.
//
// Environment: JOBQ_DSN, JOBQ_QUEUES (comma-separated; empty: every queue), JOBQ_CONCURRENCY (jobs
// at once, 10), JOBQ_NAME (node-<host>-<pid>), JOBQ_POOLED=1 (behind a transaction-mode pooler),
// JOBQ_WAIT_S (an idle checkout's wait inside the server, 5), JOBQ_LOG_JSON=1 (one JSON line per
// event on stdout: the handler's "started"/"finished" and the library's events).
'use strict';
const os = require('node:os');
const { setTimeout: sleep } = require('node:timers/promises');
const { Worker } = require('jobq');

const env = (key, fallback = '') => process.env[key] || fallback;
const NAME = env('JOBQ_NAME', `node-${os.hostname()}-${process.pid}`);
const QUEUES = env('JOBQ_QUEUES').split(',').filter(Boolean);
const KINDS = ['send_mail', 'build_report', 'sync_inventory', 'call_partner', 'transcode', 'tick', 'ship'];

function say(event, fields = {}) {
  const line = { ts: Date.now() / 1000, event, worker: NAME, lang: 'node', ...fields };
  if ('id' in line) line.id = Number(line.id); // bigint ids arrive as strings
  if (env('JOBQ_LOG_JSON') === '1') process.stdout.write(JSON.stringify(line) + '\n');
  else console.error(line);
}

async function demo(job) {
  say('started', { id: job.id, attempt: job.attempt });
  const payload = job.payload ?? {};
  if (payload.sleep_ms) await sleep(payload.sleep_ms, undefined, { signal: job.signal });
  if (payload.fail) throw new Error(`job ${job.id} failed on purpose`);
  say('finished', { id: job.id });
  return { worker: NAME, lang: 'node' };
}

async function order(job) { // a workflow: each step once, across crashes and suspensions
  say('started', { id: job.id, attempt: job.attempt });
  const steps = job.durable(), n = job.payload.order;
  const charge = await steps.step('charge', () => ({ charged_by: NAME }));
  say('step', { id: job.id, step: 'pack' });
  await steps.step('pack', async () => { await sleep(job.payload.pack_ms); return { packed_by: NAME }; });
  const boxes = await steps.spawn('ship', 'shipments', [0, 1, 2].map((box) => ({ sleep_ms: 200, order: n, box })), { kind: 'ship' });
  const shipped = await steps.gather(boxes); // suspends the order until the three are done
  const delivered = await steps.awaitEvent(`order-${n}:delivered`); // suspends it until the event comes
  say('finished', { id: job.id });
  return { worker: NAME, lang: 'node', ...charge, shipped: shipped.length, delivered };
}

const worker = new Worker(env('JOBQ_DSN', 'postgresql://jobq_demo_app@127.0.0.1:5499/jobq_demo'), {
  name: NAME, queues: QUEUES, concurrency: Number(env('JOBQ_CONCURRENCY', '10')), pooled: env('JOBQ_POOLED') === '1',
  waitMs: Number(env('JOBQ_WAIT_S', '5')) * 1000, log: ({ event, ...fields }) => say(event, fields),
});
for (const name of [...KINDS, ...QUEUES]) worker.handle(name, demo);
worker.handle('order', order);
worker.run().then(() => process.exit(0), (e) => { console.error(e); process.exit(1); });
