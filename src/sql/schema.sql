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
    backend_start  timestamptz,   -- with backend_pid: identifies the session, not just the pid
    stopping_at    timestamptz    -- set by jobq_stop_checkouts: its checkouts claim nothing more
);

CREATE SEQUENCE jobq.jobs_id_seq AS bigint;

-- Jobs live in two tables, so that what checkout and completion touch stays the size of
-- the work in flight, however much history is kept (docs/internals.md, "History apart"):
--   jobq.live_jobs      jobs in state 'ready', 'executing' or 'blocked';
--   jobq.finished_jobs  jobs 'completed', 'dead' or 'cancelled', until jobq.retention prunes them;
--   jobq.jobs           the view of both that clients read (src/sql/grants.sql).
-- A job moves between them in one transaction (DELETE ... RETURNING, then INSERT), so a
-- snapshot sees it in exactly one. The two tables have the same columns in the same order.
CREATE TABLE jobq.live_jobs (
    id                   bigint PRIMARY KEY DEFAULT nextval('jobq.jobs_id_seq'),
    queue                text NOT NULL,
    kind                 text,
    payload              jsonb NOT NULL,
    priority             integer NOT NULL,
    run_at               timestamptz NOT NULL,
    enqueued_at          timestamptz NOT NULL,
    -- 'ready', 'executing', 'blocked', 'completed', 'dead' or 'cancelled'. Only jobq's functions write
    -- these tables; there is deliberately no CHECK here: PostgreSQL 15 deserialises a table's
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
    result               jsonb,
    rate_key             text,          -- its starts count against jobq_set_rate_limit(rate_key, ...)
    -- Every failed attempt, oldest first, the last 100: [{"attempt": 1, "at": …, "error": …}, …]
    -- (jobq_fail's error; {"interrupted": true} where the reaper cut the attempt off). Written
    -- only when an attempt fails: nothing on the path of a job that succeeds.
    errors               jsonb,
    -- Workflows (src/sql/workflows.sql): the jobs this one depends on, as enqueued, and what
    -- its steps recorded with jobq_checkpoint (kept across attempts, suspensions and retries).
    depends_on           bigint[],
    checkpoints          jsonb NOT NULL DEFAULT '{}',
    -- Fair checkout (src/sql/fairness.sql): the key whose turn this job waits for; NULL, none.
    fairness_key         text
)
-- Every job leaves two dead versions here (the claim's update, the completion's delete):
-- vacuumed after a fixed number of them, without cost-based sleeps, like jobq.ready below,
-- so the table stays the size of the work in flight instead of growing by 20% of it between
-- visits, and catches up at once after a long transaction elsewhere ended.
WITH (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 5000,
      autovacuum_vacuum_cost_delay = 0);
ALTER SEQUENCE jobq.jobs_id_seq OWNED BY jobq.live_jobs.id;

-- jobq.live_jobs has no index on waiting jobs: checkout reads jobq.ready below and touches a
-- job row only to claim it, by primary key.
-- Heartbeat (cancel requests), unregister and the reaper find a worker's jobs here.
CREATE INDEX jobs_executing_by_worker ON jobq.live_jobs (worker_id) WHERE state = 'executing';

-- No CHECK of the finished states either (it would let a query through jobq.jobs for live
-- states skip this table, but costs every completion; see live_jobs): dashboards that look
-- for waiting or executing jobs read jobq.live_jobs, which jobq_reader may read.
CREATE TABLE jobq.finished_jobs (LIKE jobq.live_jobs, PRIMARY KEY (id));
-- The reaper prunes finished jobs oldest first.
CREATE INDEX jobs_finished ON jobq.finished_jobs (finished_at);
-- Dashboards: dead and cancelled jobs by state and queue, newest first (jobq.queue_depths,
-- filters). Completed jobs, the bulk of the history, have no entry: a completion writes none.
CREATE INDEX jobs_finished_unusual ON jobq.finished_jobs (state, queue, id) WHERE state <> 'completed';
-- jobq.queue_stats: the queues of the history, one descent each (src/sql/stats.sql), so a depth
-- check does not read the finished jobs. A completion's one more index entry, measured in
-- bench/results/instructions.md.
CREATE INDEX jobs_finished_by_queue ON jobq.finished_jobs (queue);

-- A job's error history (the column `errors`) with `entry` appended, the oldest dropped past 100.
CREATE FUNCTION jobq._add_error(errors jsonb, entry jsonb) RETURNS jsonb
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, jobq, pg_temp AS $$
    SELECT CASE WHEN jsonb_array_length(e) > 100 THEN e - 0 ELSE e END
      FROM (SELECT coalesce(errors, '[]') || jsonb_build_array(entry) AS e) x
$$;

-- Moves jobs `ids` that are in a finished state from jobq.live_jobs to jobq.finished_jobs,
-- and tells the jobs that depend on or await them (jobq._settle, src/sql/workflows.sql).
-- The paths that finish a job rarely (cancel, death, cancellation by the reaper) set the
-- state in place and then call this; completion, the hot path, moves its row in one step.
CREATE FUNCTION jobq._archive(ids bigint[]) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_moved  bigint[];
    v_states text[];
BEGIN
    WITH moved AS (
        DELETE FROM jobq.live_jobs j
         WHERE j.id = ANY (ids) AND j.state IN ('completed', 'dead', 'cancelled')
        RETURNING j.*
    ), kept AS (
        INSERT INTO jobq.finished_jobs SELECT * FROM moved RETURNING id, state
    )
    SELECT array_agg(k.id ORDER BY k.id), array_agg(k.state ORDER BY k.id) INTO v_moved, v_states FROM kept k;
    PERFORM jobq._settle(v_moved, v_states);
END $$;

-- The waiting set: exactly one row per job in state 'ready' (due or scheduled), with what
-- checkout orders, filters and claims by, and nothing else. Checkout walks this small table
-- instead of the job rows: an enqueue inserts the row, the claim deletes it, so the job row
-- is not re-indexed for the ready state and the index checkout walks holds only waiting
-- jobs (plus the dead entries of recent claims, until vacuum). Every function that makes a
-- job ready inserts its row (jobq._enter_ready); every function that takes a job out of
-- 'ready' deletes it in the same transaction.
-- Lock order: a writer that changes a waiting job locks its ready row first, then the job
-- row (jobq._lock_ready); checkout holds ready rows while it claims their jobs.
CREATE TABLE jobq.ready (
    queue              text NOT NULL,
    priority           integer NOT NULL,
    run_at             timestamptz NOT NULL,
    id                 bigint NOT NULL,
    kind               text,               -- for pauses of a kind
    keyed              boolean NOT NULL,   -- needs an execution slot or a start of its rate, or gives up a key, to start
    concurrency_key    text,
    concurrency_limit  integer,
    while_key          text,               -- the unique key of a while_executing job
    rate_key           text,               -- a rate key (src/sql/rate_limits.sql)
    -- ready_by_queue's leading column: fixed-width, so that a walk's key checks read every
    -- column of an index entry at a cached offset (behind a text column each is found by
    -- walking the entry), and compare integers, not text. Two queues may share a hash:
    -- every statement that walks ready_by_queue also tests `queue` on the row.
    queue_hash         integer NOT NULL GENERATED ALWAYS AS (pg_catalog.hashtext(queue)) STORED,
    -- The job's fairness key (src/sql/fairness.sql). A row with one is in ready_fair only:
    -- the plain checkout never meets it, and a fair queue's keys are found without walking
    -- past one another's backlogs.
    fairness_key       text
)
-- Every claim leaves a dead row whose index entries sit at the front of the claim order,
-- where the next checkout starts walking: measured, 15,600 of them cost a checkout 0.5 ms
-- (80 index pages), 0.05 ms after a VACUUM. So autovacuum takes this table after a fixed
-- number of claims, not after 20% of the backlog, and without cost-based sleeps
-- (docs/internals.md; autovacuum_naptime still bounds how often).
WITH (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 5000,
      autovacuum_vacuum_insert_scale_factor = 0, autovacuum_vacuum_insert_threshold = 50000,
      autovacuum_vacuum_cost_delay = 0);
-- Checkout of one queue walks this index in exactly the claim order: no sort, and the
-- first row that is due, unpaused and not locked by another checkout is taken. Walked with
-- `queue_hash = hashtext($1) AND queue = $1`. Jobs without a fairness key only: every
-- statement that walks it says `fairness_key IS NULL`.
CREATE INDEX ready_by_queue ON jobq.ready (queue_hash, priority, run_at, id) WHERE fairness_key IS NULL;
-- Checkout of any queue (queues => NULL) or of several queues walks this one.
CREATE INDEX ready_any ON jobq.ready (priority, run_at, id) WHERE fairness_key IS NULL;
-- Jobs with a fairness key, by queue, priority and key, each key's in claim order: the fair
-- checkout finds a queue's top due priority, then each key's oldest due job, in one descent
-- each (src/sql/fairness.sql).
CREATE INDEX ready_fair ON jobq.ready (queue_hash, priority, fairness_key, run_at, id) WHERE fairness_key IS NOT NULL;
-- Checkout's statements keep a generic plan, which estimates `queue = $1` (and
-- `queue_hash = $1`) as 1 / (the number of distinct queues ANALYZE saw). Where it saw one (a
-- database that started with one queue) that is every row, and the one-queue statements
-- walked ready_any, reading every row of the other queues ahead of theirs (measured: 20,000
-- rows per checkout of a second queue behind a backlog of 20,000; tests/lifecycle.rs). A
-- fixed estimate of many queues keeps them on ready_by_queue whatever ANALYZE saw;
-- statements over several or all queues filter by queue and keep ready_any either way.
ALTER TABLE jobq.ready ALTER COLUMN queue SET (n_distinct = 1000);
ALTER TABLE jobq.ready ALTER COLUMN queue_hash SET (n_distinct = 1000);

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
    ns      "char" NOT NULL,
    key     text NOT NULL,
    slot    integer NOT NULL,
    job_id  bigint NOT NULL,
    PRIMARY KEY (ns, key, slot)
)
-- A row per keyed job's attempt, inserted and deleted: vacuumed like jobq.ready (below), so a
-- slot lookup does not walk the dead entries of every earlier attempt of its key.
WITH (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 5000,
      autovacuum_vacuum_cost_delay = 0);

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
    started_at         timestamptz,
    depends_on         bigint[],
    checkpoints        jsonb,
    fairness_key       text
);

-- pg_dump keeps the queue: these tables' rows and the id sequence are dumped with the
-- database (an extension's tables are otherwise dumped empty), so a restore continues where
-- the dump was taken: no job lost, no id reused, every key still held.
SELECT pg_catalog.pg_extension_config_dump('jobq.workers', '');
SELECT pg_catalog.pg_extension_config_dump('jobq.live_jobs', '');
SELECT pg_catalog.pg_extension_config_dump('jobq.finished_jobs', '');
SELECT pg_catalog.pg_extension_config_dump('jobq.jobs_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('jobq.ready', '');
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

-- Makes jobs `ids` waiting: inserts the ready row of each of them that is in state 'ready',
-- and lowers the claim floors to their keys at commit (src/floors.rs). The one place that
-- derives a ready row from a job row.
-- enable_seqscan = off: the job rows are read by primary key only. PL/pgSQL keeps this
-- statement's plan for the session, and for `id = ANY (ids)` (an array of unknown length)
-- over a table whose statistics say it is small, as after CREATE EXTENSION, that plan is a
-- sequential scan: every enqueue then read every job row (measured: 0.6 ms of CPU per
-- enqueue after 8,000 jobs, 1,200 enqueues/s at one client).
CREATE FUNCTION jobq._enter_ready(ids bigint[]) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, pg_temp SET enable_seqscan = off AS $$
DECLARE
    v_groups integer;
BEGIN
    -- One pass: the inserted rows' keys feed the floors. The rows of one call share queue,
    -- priority and run_at but for a requeue by the reaper.
    WITH ins AS (
        INSERT INTO jobq.ready (queue, priority, run_at, id, kind, keyed, concurrency_key,
                                concurrency_limit, while_key, rate_key, fairness_key)
        SELECT j.queue, j.priority, j.run_at, j.id, j.kind,
               j.concurrency_key IS NOT NULL OR j.rate_key IS NOT NULL
                   OR coalesce(j.unique_strategy IN ('while_executing', 'until_executing'), false),
               j.concurrency_key, j.concurrency_limit,
               CASE WHEN j.unique_strategy = 'while_executing' THEN j.unique_key END, j.rate_key,
               j.fairness_key
          FROM jobq.live_jobs j
         WHERE j.id = ANY (ids) AND j.state = 'ready'
        RETURNING queue, priority, run_at, id, fairness_key
    )
    SELECT count(*) INTO v_groups
      FROM (SELECT jobq._lower_floor('jobq.ready'::regclass, i.queue, i.priority, i.run_at, min(i.id)),
                   jobq._wake(i.queue, i.run_at, count(*)),  -- waiting checkouts, at commit
                   -- a fairness key's turn (src/sql/fairness.sql)
                   CASE WHEN bool_or(i.fairness_key IS NOT NULL) THEN
                       jobq._fair_keys(i.queue, i.priority, array_agg(DISTINCT i.fairness_key) FILTER (WHERE i.fairness_key IS NOT NULL))
                   END
              FROM ins i
             GROUP BY i.queue, i.priority, i.run_at) g;
END $$;

-- Locks the ready row of waiting job `job` and returns its ctid; NULL when the job is not
-- waiting. Callers then lock the job row: ready row first, as checkout does, so that a
-- cancel or a replace never deadlocks with a checkout claiming the same job. The row is
-- found through ready_by_queue with the job row's values; if it changed or was claimed
-- between the two reads, look again. A job with a fairness key has its row in ready_fair.
CREATE FUNCTION jobq._lock_ready(job bigint) RETURNS tid
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    j     record;
    prev  text;   -- what the last look found: the same twice means no ready row to lock
    v     tid;
BEGIN
    LOOP
        SELECT x.queue, x.priority, x.run_at, x.state, x.fairness_key INTO j FROM jobq.live_jobs x WHERE x.id = job;
        IF NOT FOUND OR j.state <> 'ready' OR j::text = prev THEN
            RETURN NULL;
        END IF;
        IF j.fairness_key IS NULL THEN
            SELECT r.ctid INTO v FROM jobq.ready r
             WHERE r.queue_hash = hashtext(j.queue) AND r.queue = j.queue AND r.fairness_key IS NULL
               AND r.priority = j.priority AND r.run_at = j.run_at AND r.id = job
               FOR UPDATE OF r;
        ELSE
            SELECT r.ctid INTO v FROM jobq.ready r
             WHERE r.queue_hash = hashtext(j.queue) AND r.queue = j.queue AND r.fairness_key = j.fairness_key
               AND r.priority = j.priority AND r.run_at = j.run_at AND r.id = job
               FOR UPDATE OF r;
        END IF;
        IF FOUND THEN
            RETURN v;
        END IF;
        prev := j::text;
    END LOOP;
END $$;
