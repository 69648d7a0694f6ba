-- jobq schema: tables, the jobq.job type, indexes, and what pg_dump keeps.
-- Clients read these (privileges.sql says who); every write goes through the jobq_*
-- functions (SECURITY DEFINER).

CREATE SCHEMA IF NOT EXISTS jobq;

-- One row per registered worker process. A worker is alive while its heartbeat is younger
-- than jobq.heartbeat_timeout and, when bound to a session, while that session lives.
CREATE TABLE jobq.workers (
    id             uuid PRIMARY KEY,
    owner          regrole NOT NULL,  -- the role that registered it (src/privileges.rs)
    name           text,
    metadata       jsonb NOT NULL DEFAULT '{}',
    registered_at  timestamptz NOT NULL,
    heartbeat_at   timestamptz NOT NULL,
    backend_pid    integer,       -- set only with bind_to_session
    backend_start  timestamptz    -- with backend_pid: identifies the session, not just the pid
);

CREATE SEQUENCE jobq.jobs_id_seq AS bigint;

-- Every job, from enqueue until jobq.retention after it finished.
CREATE TABLE jobq.jobs (
    id                   bigint PRIMARY KEY DEFAULT nextval('jobq.jobs_id_seq'),
    queue                text NOT NULL,
    kind                 text,
    payload              jsonb NOT NULL,
    priority             integer NOT NULL,
    run_at               timestamptz NOT NULL,
    enqueued_at          timestamptz NOT NULL,
    -- 'ready', 'executing', 'completed', 'dead' or 'cancelled'. Only jobq's functions write
    -- this table; there is deliberately no CHECK here: PostgreSQL 15 deserialises a table's
    -- CHECK expressions on every UPDATE statement, ~3.5% of the checkout+complete path.
    state                text NOT NULL,
    attempt              integer NOT NULL DEFAULT 0,
    max_attempts         integer NOT NULL,
    unique_key           text,
    unique_strategy      text,          -- 'until_executed', 'until_executing', 'while_executing'
    concurrency_key      text,
    concurrency_limit    integer,
    worker_id            uuid,          -- the worker running it (kept after it finishes, for history)
    started_at           timestamptz,   -- start of the current or last attempt
    finished_at          timestamptz,   -- set when completed, dead or cancelled
    interrupted_at       timestamptz,   -- when the reaper last cut an attempt off
    cancel_requested_at  timestamptz,
    concurrency_slot     integer,       -- the slot of jobq.slots held while executing
    last_error           jsonb,
    result               jsonb
);
ALTER SEQUENCE jobq.jobs_id_seq OWNED BY jobq.jobs.id;

-- Checkout of one queue walks this index in exactly the claim order: no sort, and the
-- first row that is due, unpaused and not locked by another checkout is taken.
CREATE INDEX jobs_ready_by_queue ON jobq.jobs (queue, priority, run_at, id) WHERE state = 'ready';
-- Checkout of any queue (queues => NULL) or of several queues walks this one.
CREATE INDEX jobs_ready ON jobq.jobs (priority, run_at, id) WHERE state = 'ready';
-- Heartbeat (cancel requests), unregister and the reaper find a worker's jobs here.
CREATE INDEX jobs_executing_by_worker ON jobq.jobs (worker_id) WHERE state = 'executing';
-- The reaper prunes finished jobs oldest first.
CREATE INDEX jobs_finished ON jobq.jobs (finished_at) WHERE state IN ('completed', 'dead', 'cancelled');

-- Named locks and unique keys share this one namespace (its primary key). A row is held
-- either by a worker (jobq_acquire_lock, with a ttl) or by a job (an until_executed key
-- for the job's whole life, an until_executing key while the job waits).
CREATE TABLE jobq.locks (
    key          text PRIMARY KEY,
    worker_id    uuid,
    job_id       bigint,
    acquired_at  timestamptz NOT NULL,
    expires_at   timestamptz,
    CHECK ((worker_id IS NULL) <> (job_id IS NULL)),
    CHECK ((worker_id IS NULL) = (expires_at IS NULL))
);
CREATE INDEX locks_by_worker ON jobq.locks (worker_id) WHERE worker_id IS NOT NULL;

-- Execution slots held by executing jobs. A job with concurrency key K and limit L must
-- hold a slot ('c', K, s) with 1 <= s <= L to execute; a job with while_executing key K, the
-- slot ('u', K, 1). The primary key lets one row exist per slot, so at most L jobs of limit
-- L can hold one, whatever the interleaving. A row exists only while its job holds it:
-- checkout inserts it, the end of the attempt deletes it, so keys no job uses leave nothing
-- behind, and an enqueue writes no slot (two enqueuers can never wait for each other here).
CREATE TABLE jobq.slots (
    ns      "char" NOT NULL CHECK (ns IN ('c', 'u')),
    key     text NOT NULL,
    slot    integer NOT NULL,
    job_id  bigint NOT NULL,
    PRIMARY KEY (ns, key, slot)
);

-- Paused queues (kind NULL), kinds in every queue (queue NULL), or one kind in one queue.
CREATE TABLE jobq.pauses (
    queue      text,
    kind       text,
    paused_at  timestamptz NOT NULL,
    CHECK (queue IS NOT NULL OR kind IS NOT NULL),
    UNIQUE NULLS NOT DISTINCT (queue, kind)
);

-- What jobq_checkout returns.
CREATE TYPE jobq.job AS (
    id                 bigint,
    queue              text,
    kind               text,
    payload            jsonb,
    priority           integer,
    attempt            integer,
    max_attempts       integer,
    run_at             timestamptz,
    enqueued_at        timestamptz,
    unique_key         text,
    concurrency_key    text,
    interrupted_at     timestamptz,
    last_error         jsonb,
    unique_strategy    text,
    concurrency_limit  integer,
    started_at         timestamptz
);

-- pg_dump keeps the queue: these tables' rows and the id sequence are dumped with the
-- database (an extension's tables are otherwise dumped empty), so a restore continues where
-- the dump was taken: no job lost, no id reused, every key still held.
SELECT pg_catalog.pg_extension_config_dump('jobq.workers', '');
SELECT pg_catalog.pg_extension_config_dump('jobq.jobs', '');
SELECT pg_catalog.pg_extension_config_dump('jobq.jobs_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('jobq.locks', '');
SELECT pg_catalog.pg_extension_config_dump('jobq.slots', '');
SELECT pg_catalog.pg_extension_config_dump('jobq.pauses', '');

-- Raises the error every function gives for an unknown or dead worker.
CREATE FUNCTION jobq._unknown_worker(worker uuid) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, pg_temp AS $$
BEGIN
    RAISE EXCEPTION 'jobq: worker % is unknown or reaped', worker
        USING ERRCODE = 'JQ001',
              HINT = 'Stop its jobs and register again with jobq_register_worker().';
END $$;
CREATE INDEX locks_expiring ON jobq.locks (expires_at) WHERE worker_id IS NOT NULL;
