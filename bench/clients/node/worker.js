// bench/clients.sh, Node: one worker process over one queue of no-op jobs, C jobs in flight.
//
//   node bench/clients/node/worker.js raw     DSN QUEUE C
//   node bench/clients/node/worker.js shaped  DSN QUEUE C
//   node bench/clients/node/worker.js library DSN QUEUE C
//
// raw: the hand-written loop on pg (the copy clients/node installs, found through NODE_PATH):
// register, wait inside the server for up to C jobs (jobq_checkout with wait), run them with a
// no-op, then jobq_complete_and_checkout(worker, done, NULL, ARRAY[queue], C) over and over:
// each call completes the jobs in hand and takes the next C (named statements, parsed once per
// connection). When a call returns nothing, back to the waiting checkout. A heartbeat every
// heartbeat_timeout / 3 between calls.
//
// shaped: the raw loop reading the job columns the library reads (JOB_COLUMNS in
// clients/node/src/client.ts, copied below): what a worker that hands its handlers the whole
// job costs before any of the library's own work.
//
// library: the jobq package's Worker (clients/node/dist, built by `npm run build`) with
// concurrency C and one no-op async handler for the queue.
//
// Both run until SIGTERM (bench/clients.sh sends it once the queue is drained).
'use strict';
const path = require('path');

const RAW_COLUMNS = 'id, queue, kind, payload, attempt';
// As JOB_COLUMNS in clients/node/src/client.ts.
const LIBRARY_COLUMNS =
  'id, queue, kind, payload, priority, attempt, max_attempts, run_at, enqueued_at, unique_key, ' +
  'concurrency_key, interrupted_at, last_error, depends_on, checkpoints';

async function raw(dsn, queue, c, columns = RAW_COLUMNS) {
  const { Client } = require('pg');
  const db = new Client({ connectionString: dsn });
  await db.connect();
  const { rows: [reg] } = await db.query(
    `SELECT jobq_register_worker($1, bind_to_session => true) AS id,
            extract(epoch FROM current_setting('jobq.heartbeat_timeout')::interval)::float8 AS timeout`,
    [`bench-node-raw-${process.pid}`]);
  const worker = reg.id;
  const beatMs = (reg.timeout * 1000) / 3;
  let nextBeat = Date.now() + beatMs;
  const queues = [queue];
  let done = [];
  for (;;) {
    let rows = [];
    if (done.length > 0) {
      ({ rows } = await db.query({
        name: 'fused',
        text: `SELECT ${columns}
                 FROM jobq_complete_and_checkout($1, $2::bigint[], NULL, $3::text[], $4)`,
        values: [worker, done, queues, c],
      }));
    }
    if (rows.length === 0) {
      ({ rows } = await db.query({
        name: 'waiting',
        text: `SELECT ${columns}
                 FROM jobq_checkout($1, $2::text[], $3, wait => interval '1 s')`,
        values: [worker, queues, c],
      }));
    }
    done = [];
    for (const job of rows) done.push(job.id); // the no-op handler
    if (Date.now() >= nextBeat) {
      await db.query({ name: 'heartbeat', text: 'SELECT jobq_heartbeat($1)', values: [worker] });
      nextBeat = Date.now() + beatMs;
    }
  }
}

async function library(dsn, queue, c) {
  const { Worker } = require(path.join(__dirname, '../../../clients/node/dist'));
  const worker = new Worker(dsn, { queues: [queue], concurrency: c, name: `bench-node-library-${process.pid}` });
  worker.handle(queue, async () => undefined);
  await worker.run();
}

const modes = { raw, shaped: (dsn, queue, c) => raw(dsn, queue, c, LIBRARY_COLUMNS), library };
const [mode, dsn, queue, c] = process.argv.slice(2);
if (!(mode in modes) || !dsn || !queue || !c) {
  console.error('usage: worker.js raw|shaped|library DSN QUEUE CONCURRENCY');
  process.exit(2);
}
modes[mode](dsn, queue, Number(c)).then(
  () => process.exit(0),
  (e) => { console.error(e); process.exit(1); },
);
