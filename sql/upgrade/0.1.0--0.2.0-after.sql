-- After 0.2.0's install script: 0.1.0's rows move into 0.2.0's tables, in this one
-- transaction (ALTER EXTENSION runs its script in the caller's transaction), then 0.1.0's
-- schema goes. What changed:
--   jobq.jobs (one table)  -> jobq.live_jobs (ready, executing) + jobq.finished_jobs (the
--                             rest), and jobq.ready, one row per waiting job (_enter_ready);
--   jobq.workers           -> gains owner: 0 ("none") for workers registered under 0.1.0,
--                             which had no owners; any role granted jobq_worker may act for
--                             them, as anyone could in 0.1.0 (src/privileges.rs), so workers
--                             running across the upgrade finish their jobs;
--   jobq.slots             -> a row only while a job holds its slot (0.1.0 kept free ones);
--   jobq.locks, jobq.pauses, jobq.jobs_id_seq: as they were.
INSERT INTO jobq.workers (id, owner, name, metadata, registered_at, heartbeat_at, backend_pid, backend_start)
SELECT id, 0::oid::regrole, name, metadata, registered_at, heartbeat_at, backend_pid, backend_start
  FROM jobq_0_1_0.workers;

INSERT INTO jobq.live_jobs (id, queue, kind, payload, priority, run_at, enqueued_at, state, attempt,
                            max_attempts, unique_key, unique_strategy, concurrency_key, concurrency_limit,
                            worker_id, started_at, finished_at, interrupted_at, cancel_requested_at,
                            concurrency_slot, last_error, result)
SELECT id, queue, kind, payload, priority, run_at, enqueued_at, state, attempt,
       max_attempts, unique_key, unique_strategy, concurrency_key, concurrency_limit,
       worker_id, started_at, finished_at, interrupted_at, cancel_requested_at,
       concurrency_slot, last_error, result
  FROM jobq_0_1_0.jobs
 WHERE state IN ('ready', 'executing');

INSERT INTO jobq.finished_jobs (id, queue, kind, payload, priority, run_at, enqueued_at, state, attempt,
                                max_attempts, unique_key, unique_strategy, concurrency_key, concurrency_limit,
                                worker_id, started_at, finished_at, interrupted_at, cancel_requested_at,
                                concurrency_slot, last_error, result)
SELECT id, queue, kind, payload, priority, run_at, enqueued_at, state, attempt,
       max_attempts, unique_key, unique_strategy, concurrency_key, concurrency_limit,
       worker_id, started_at, finished_at, interrupted_at, cancel_requested_at,
       concurrency_slot, last_error, result
  FROM jobq_0_1_0.jobs
 WHERE state NOT IN ('ready', 'executing');

SELECT jobq._enter_ready(array_agg(id)) FROM jobq.live_jobs WHERE state = 'ready';

INSERT INTO jobq.locks (key, worker_id, job_id, acquired_at, expires_at)
SELECT key, worker_id, job_id, acquired_at, expires_at FROM jobq_0_1_0.locks;

INSERT INTO jobq.slots (ns, key, slot, job_id)
SELECT ns, key, slot, job_id FROM jobq_0_1_0.slots WHERE job_id IS NOT NULL;

INSERT INTO jobq.pauses (queue, kind, paused_at)
SELECT queue, kind, paused_at FROM jobq_0_1_0.pauses;

SELECT pg_catalog.setval('jobq.jobs_id_seq', last_value, is_called) FROM jobq_0_1_0.jobs_id_seq;

DROP SCHEMA jobq_0_1_0 CASCADE;
