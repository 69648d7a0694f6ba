#!/usr/bin/env node
/*
 * jobq reference worker in Node.js (pg).
 *
 * What it does
 *   Registers a jobq worker, then loops: check out up to JOBQ_BATCH jobs, run a
 *   handler on each in turn, and report the batch's successes (the handler's return
 *   value is the result) in the same call that checks out the next batch,
 *   jobq_complete_and_checkout: one round trip and one commit per batch. A failure is
 *   reported at once with jobq_fail (error = {message, type} of what it threw). JQ002
 *   from the fused call (a job in hand was finished elsewhere) makes it report the
 *   others with jobq_complete_many. When the queue is empty it waits inside the
 *   server: jobq_checkout(..., wait => JOBQ_WAIT_S), which returns as soon as a commit
 *   makes a job available (no LISTEN, no polling; works through a transaction-mode
 *   pooler). With JOBQ_WAIT_S=0 it waits for NOTIFY jobq instead, polling every
 *   JOBQ_POLL_S (or only polls, when pooled). A timer heartbeats on its own connection every heartbeat_timeout / 3,
 *   sending the ids of the jobs in hand (`holding`: the server puts back any job
 *   executing under this worker that the list lacks, e.g. a checkout whose reply was
 *   lost), and logs cancellation requests; a cancelled job that has not started yet
 *   is failed (it becomes `cancelled`) instead of run.
 *
 *   SIGTERM / SIGINT: take no more work, finish the jobs in hand, unregister, exit 0.
 *   SQLSTATE JQ001 (this worker was reaped or unregistered): drop the jobs in hand
 *   without reporting them (they run again elsewhere), register again, go on.
 *   Connection lost: the worker is registered with bind_to_session, so the server
 *   treats it as dead as soon as its session ends and the reaper requeues its jobs;
 *   the worker reconnects with exponential backoff (1 s .. 30 s) and registers again.
 *
 *   Behind a pooler in transaction mode (JOBQ_POOLED=1, e.g. PgBouncer with
 *   pool_mode = transaction), where consecutive calls may run in different server
 *   sessions: no LISTEN (it polls every JOBQ_POLL_S instead), no bind_to_session (its
 *   liveness is its heartbeats alone, so a crash is noticed after jobq.heartbeat_timeout);
 *   a lost connection keeps the registration, which is not tied to a session. (pg sends
 *   each parameterised query as one unnamed statement ending in one Sync: nothing of it
 *   outlives the transaction.)
 *
 * How to run (Node 20)
 *   cd examples/node && npm ci
 *   JOBQ_DSN=postgresql://jobq_demo_app@127.0.0.1:5499/jobq_demo node worker.js
 *
 *   Enqueue from psql:  SELECT jobq_enqueue('default', '{"sleep_ms": 200}');
 *
 * Environment
 *   JOBQ_DSN          connection string          (postgresql://jobq_demo_app@127.0.0.1:5499/jobq_demo)
 *   JOBQ_QUEUES       comma-separated queues     (empty: every queue)
 *   JOBQ_BATCH        jobs per checkout          (10)
 *   JOBQ_HEARTBEAT_S  heartbeat period, seconds  (the server's jobq.heartbeat_timeout / 3)
 *   JOBQ_HANDLER      path of a module exporting the handler, instead of the demo one
 *   JOBQ_LOG_JSON     1: one JSON line per event on stdout (for test harnesses)
 *   JOBQ_POOLED       1: behind a pooler in transaction mode (above)
 *   JOBQ_WAIT_S       how long an idle checkout waits inside the server, seconds (5; 0: LISTEN/poll instead)
 *   JOBQ_POLL_S       with JOBQ_WAIT_S=0: how long an idle worker waits before it looks again (1)
 *
 * The handler is an (async) function taking the job row ({id, queue, kind, payload,
 * attempt, ...}; id is a string, as pg returns bigint) and returning a JSON-serialisable
 * result; throwing fails the job. The demo handler reads the payload: {"sleep_ms": N}
 * sleeps N ms, {"fail": true} throws, anything else (e.g. {"crash_hint": true}) just
 * completes; its result is {"worker": <name>, "lang": "node"}.
 */
'use strict';
const net = require('node:net');
const os = require('node:os');
const path = require('node:path');
const { Client, DatabaseError } = require('pg');

const DSN = process.env.JOBQ_DSN || 'postgresql://jobq_demo_app@127.0.0.1:5499/jobq_demo';
const queueList = (process.env.JOBQ_QUEUES || '').split(',').map((q) => q.trim()).filter(Boolean);
const QUEUES = queueList.length ? queueList : null;
const BATCH = Number(process.env.JOBQ_BATCH || 10);
const HEARTBEAT_S = Number(process.env.JOBQ_HEARTBEAT_S) || null;
const LOG_JSON = process.env.JOBQ_LOG_JSON === '1';
const NAME = `node-${os.hostname()}-${process.pid}`;
const POLL_MS = (Number(process.env.JOBQ_POLL_S) || 1) * 1000;
const WAIT_S = process.env.JOBQ_WAIT_S === '0' ? 0 : Number(process.env.JOBQ_WAIT_S) || 5;
const POOLED = process.env.JOBQ_POOLED === '1';

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

function log(event, fields = {}) {
  // Writes to pipes and files are synchronous on Linux: each line is out when this returns.
  if (LOG_JSON) {
    process.stdout.write(JSON.stringify({ ts: Date.now() / 1000, event, worker: NAME, lang: 'node', ...fields }) + '\n');
  } else {
    const kv = Object.entries(fields).map(([k, v]) => `${k}=${v}`).join(' ');
    process.stderr.write(`${new Date().toISOString().slice(11, 19)} ${NAME} ${event} ${kv}\n`);
  }
}

async function demoHandler(job) {
  const payload = job.payload && typeof job.payload === 'object' ? job.payload : {};
  if (payload.sleep_ms) await sleep(payload.sleep_ms);
  if (payload.fail) throw new Error(`job ${job.id} failed on purpose`);
  return { worker: NAME, lang: 'node' };
}

// A server error is a bug or bad input, except connection / shutdown classes;
// anything else (ECONNRESET, "Connection terminated", ...) is the network.
const isConnectionError = (e) => !(e instanceof DatabaseError) || /^(08|57)/.test(e.code);
const newClient = (role) => {
  const client = new Client({ connectionString: DSN, connectionTimeoutMillis: 5000, application_name: NAME + role });
  client.on('error', () => {}); // a dead connection also fails the next query, handled there
  return client;
};

let handler = demoHandler;
let stopping = false; // SIGTERM/SIGINT: take no more work
let workerId = null; // current registration; null while (re)connecting
let reapedId = null; // a worker id that got JQ001
let heartbeatMs = 10000;
let heartbeatTimer = null;
let hbConn = null;
const cancelled = new Set(); // job ids whose cancellation was requested
// The jobs in hand (ids as strings, as pg returns bigint), sent as `holding` with every
// heartbeat, and the checkouts sent and not answered yet: their jobs may be claimed but not
// listed, so meanwhile a heartbeat sends no list. A checkout starts only after the heartbeat
// in flight (if any) returned, so none starts between reading the list and the server
// applying it.
const inHand = new Set();
let checkouts = 0;
let heartbeatInFlight = Promise.resolve();
const reaped = () => workerId !== null && reapedId === workerId;

// Idle wait, cut short by a NOTIFY (even one that arrived just before) or by stop().
let notified = false;
let wakeUp = () => {};
function idle(ms) {
  if (notified || stopping) return Promise.resolve();
  return new Promise((resolve) => {
    const timer = setTimeout(() => wakeUp(), ms);
    wakeUp = () => { clearTimeout(timer); wakeUp = () => {}; resolve(); };
  });
}
function stop() { stopping = true; wakeUp(); cancelWait(); }

// A waiting checkout's connection; stop() cancels its query (a CancelRequest on a new socket,
// as libpq's PQcancel does), so SIGTERM does not sit out the wait. Not behind a pooler, where
// the cancel may reach the pooled session after the wait has returned (PgBouncer 1.18 then
// closed the client's connection in the tests): there a stop waits out the wait.
let waitingConn = null;
function cancelWait() {
  const c = waitingConn;
  if (!c || !c.processID || POOLED) return;
  const request = Buffer.alloc(16);
  request.writeInt32BE(16, 0);
  request.writeInt32BE(80877102, 4);
  request.writeInt32BE(c.processID, 8);
  request.writeInt32BE(c.secretKey, 12);
  const socket = net.connect(c.port, c.host, () => socket.end(request));
  socket.on('error', () => {});
}

async function run(h = demoHandler) {
  handler = h;
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
  let backoff = 1000;
  while (!stopping) {
    const conn = newClient('');
    conn.on('notification', () => { notified = true; wakeUp(); });
    try {
      await conn.connect();
      if (!POOLED && !WAIT_S) await conn.query('LISTEN jobq');
      if (workerId === null) await register(conn, 'registered');
      backoff = 1000;
      await work(conn);
      await unregister(conn);
    } catch (e) {
      if (!isConnectionError(e)) throw e;
      if (!POOLED) workerId = null; // our session is gone, so is the registration
      log('disconnected', { error: e.message, retry_in: backoff / 1000 });
      notified = false; // so that only stop() cuts the backoff short
      await idle(backoff);
      backoff = Math.min(backoff * 2, 30000);
    } finally {
      await conn.end().catch(() => {});
    }
  }
  clearTimeout(heartbeatTimer);
  if (hbConn) await hbConn.end().catch(() => {});
  log('stopped');
}

// One round trip and one commit per batch: the jobs of a batch that succeeded are completed
// by the call that checks out the next batch (jobq_complete_and_checkout).
async function work(conn) {
  let done = []; // [id, result] of jobs finished here, not yet reported
  let waited = []; // jobs a waiting checkout returned: run them next
  while (!stopping) {
    notified = false;
    let jobs = waited;
    waited = [];
    if (jobs.length === 0) {
      await heartbeatInFlight;
      checkouts += 1;
      try {
        ({ rows: jobs } = await conn.query(
          'SELECT * FROM jobq_complete_and_checkout($1, $2::bigint[], $3::jsonb[], $4, $5)',
          [workerId, done.map(([id]) => id), done.map(([, r]) => r), QUEUES, BATCH]));
        for (const [id] of done) log('completed', { id: Number(id) });
      } catch (e) {
        if (e.code === 'JQ002') await completeAlone(conn, done); // some were finished elsewhere
        else if (e.code === 'JQ001') reapedId = workerId;
        else throw e;
      } finally {
        checkouts -= 1;
        for (const [id] of done) inHand.delete(String(id));
        for (const job of jobs) inHand.add(String(job.id));
      }
    }
    done = [];
    for (const job of jobs) log('claimed', { id: Number(job.id), attempt: job.attempt });
    for (const job of jobs) {
      const finished = await runOne(conn, job);
      if (finished) done.push(finished);
      else inHand.delete(String(job.id));
    }
    if (reaped()) { // JQ001: our jobs run elsewhere
      if (done.length) log('dropped', { ids: done.map(([id]) => Number(id)) });
      done = [];
      await register(conn, 'reregistered');
    } else if (jobs.length === 0 && done.length === 0) {
      if (WAIT_S) waited = await checkoutWaiting(conn); // wait inside the server for a job
      else await idle(POLL_MS); // wait for NOTIFY, or poll
    }
  }
  await completeAlone(conn, done); // stopping: report what finished before unregistering
}

// jobq_checkout with wait: the jobs it claimed, or none when the wait ran out (or stop()
// cancelled it).
async function checkoutWaiting(conn) {
  let jobs = [];
  await heartbeatInFlight;
  checkouts += 1;
  waitingConn = conn;
  try {
    if (!stopping) {
      ({ rows: jobs } = await conn.query(
        'SELECT * FROM jobq_checkout($1, $2, $3, wait => make_interval(secs => $4))',
        [workerId, QUEUES, BATCH, WAIT_S]));
    }
  } catch (e) {
    if (e.code === 'JQ001') reapedId = workerId;
    else if (e.code !== '57014') throw e; // 57014: cancelled by stop()
  } finally {
    waitingConn = null;
    checkouts -= 1;
    for (const job of jobs) inHand.add(String(job.id));
  }
  return jobs;
}

async function completeAlone(conn, done) {
  if (done.length === 0 || reaped()) return;
  const { rows: [{ ok }] } = await conn.query('SELECT jobq_complete_many($1, $2::bigint[], $3::jsonb[]) AS ok',
    [workerId, done.map(([id]) => id), done.map(([, r]) => r)]);
  const completed = new Set(ok.map(String));
  for (const [id] of done) {
    log(completed.has(String(id)) ? 'completed' : 'lost', { id: Number(id) }); // lost: not ours any more
    inHand.delete(String(id));
  }
}

// Runs one job: [id, result] to complete with the next checkout, or undefined when it was
// failed (reported at once) or dropped.
async function runOne(conn, job) {
  const id = Number(job.id);
  if (reaped()) return log('dropped', { id });
  if (cancelled.has(job.id)) {
    const state = await fail(conn, job, { message: 'cancelled before start', type: 'Cancelled' });
    return log('failed', { id, state });
  }
  let result;
  try {
    result = await handler(job);
  } catch (e) {
    if (reaped()) return log('dropped', { id });
    const error = { message: String(e?.message ?? e), type: e?.constructor?.name ?? typeof e };
    const state = await fail(conn, job, error);
    return log('failed', { id, state, error: error.message });
  }
  if (reaped()) return log('dropped', { id });
  return [job.id, result === undefined ? null : JSON.stringify(result)];
}

async function fail(conn, job, error) {
  const { rows: [{ state }] } = await conn.query('SELECT jobq_fail($1, $2, $3) AS state',
    [job.id, workerId, JSON.stringify(error)]);
  cancelled.delete(job.id);
  return state; // ready (retried later), dead, cancelled, or null (not ours any more)
}

async function register(conn, event) {
  const { rows: [row] } = await conn.query(
    `SELECT jobq_register_worker($1, $2, bind_to_session => $3) AS id,
            extract(epoch FROM current_setting('jobq.heartbeat_timeout', true)::interval) AS timeout`,
    [NAME, JSON.stringify({ lang: 'node', pid: process.pid, host: os.hostname() }), !POOLED]);
  heartbeatMs = (HEARTBEAT_S || Number(row.timeout || 30) / 3) * 1000;
  cancelled.clear();
  inHand.clear(); // the old registration's jobs run elsewhere
  workerId = row.id;
  log(event, { worker_id: workerId });
  if (!heartbeatTimer) heartbeatTimer = setTimeout(heartbeat, heartbeatMs);
}

async function unregister(conn) {
  for (let attempt = 1; ; attempt++) {
    try {
      const { rows: [{ n }] } = await conn.query('SELECT jobq_unregister_worker($1) AS n', [workerId]);
      log('unregistered', { worker_id: workerId, returned: n });
    } catch (e) {
      // 57014: stop()'s cancel, meant for a wait that had just returned, landed here.
      if (e.code === '57014' && attempt === 1) continue;
      if (e.code !== 'JQ001') throw e;
    }
    break;
  }
  workerId = null;
}

// Heartbeat: its own connection, on a timer, independent of the job loop.
async function heartbeat() {
  const wid = workerId;
  if (wid !== null && wid !== reapedId) {
    try {
      if (!hbConn) {
        hbConn = newClient('-hb');
        await hbConn.connect();
      }
      let done;
      heartbeatInFlight = new Promise((resolve) => { done = resolve; });
      const holding = checkouts > 0 ? null : [...inHand];
      const { rows: [{ ids }] } = await hbConn.query('SELECT jobq_heartbeat($1, $2::bigint[]) AS ids', [wid, holding])
        .finally(done);
      const fresh = ids.filter((id) => !cancelled.has(id));
      if (fresh.length) log('cancel_requested', { ids: fresh.map(Number) });
      for (const id of fresh) cancelled.add(id);
    } catch (e) {
      if (e.code === 'JQ001') {
        reapedId = wid; // the job loop drops its jobs and registers again
        log('heartbeat_reaped', { worker_id: wid });
      } else {
        log('heartbeat_error', { error: e.message });
        hbConn?.end().catch(() => {});
        hbConn = null;
      }
    }
  }
  if (!stopping || workerId !== null) heartbeatTimer = setTimeout(heartbeat, heartbeatMs);
}

function loadHandler() {
  const spec = process.env.JOBQ_HANDLER;
  if (!spec) return demoHandler;
  const mod = require(path.resolve(spec));
  return typeof mod === 'function' ? mod : mod.handle;
}

module.exports = { run, demoHandler };

if (require.main === module) {
  run(loadHandler()).then(
    () => process.exit(0),
    (e) => { console.error(e); process.exit(1); },
  );
}
