-- jobq 0.4.0, the SQL edition: jobq without its library, for servers where no library can be
-- installed (docs/sql-edition.md). Built by scripts/build-sql-edition.py from src/sql; do not edit.
--
--     psql -v ON_ERROR_STOP=1 -f jobq-sql--0.4.0.sql "$DATABASE_URL"
--
-- by a role that owns the database (or may create in it and in schema public) and has
-- CREATEROLE; no superuser. One transaction: a file that fails changes nothing. Run again, it
-- changes nothing.
\set ON_ERROR_STOP 1
BEGIN;
SET LOCAL check_function_bodies = off;
SET LOCAL client_min_messages = warning;
SET LOCAL search_path = public, pg_catalog;

DO $jobq$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_extension WHERE extname = 'jobq') THEN
        RAISE EXCEPTION 'jobq: the jobq extension is installed in database "%"; the SQL edition goes where it is not', current_database()
            USING ERRCODE = '55000';
    END IF;
    IF to_regprocedure('jobq._edition()') IS NULL AND to_regnamespace('jobq') IS NOT NULL THEN
        RAISE EXCEPTION 'jobq: database "%" has a schema jobq that is not the SQL edition''s', current_database()
            USING ERRCODE = '55000';
    END IF;
    IF NOT (SELECT rolsuper OR rolcreaterole FROM pg_catalog.pg_roles WHERE rolname = current_user)
       AND EXISTS (SELECT 1 FROM unnest(ARRAY['jobq_reader', 'jobq_producer', 'jobq_worker', 'jobq_admin']) r
                    WHERE NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = r)) THEN
        RAISE EXCEPTION 'jobq: role "%" may not create jobq''s roles', current_user
            USING ERRCODE = '42501', HINT = 'Install as a role with CREATEROLE (rds_superuser, cloudsqlsuperuser, azure_pg_admin, ...).';
    END IF;
END $jobq$;

SELECT to_regprocedure('jobq._edition()') IS NULL AS jobq_fresh \gset
\if :jobq_fresh
-- ---- src/sql/schema.sql ----
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
--   jobq.jobs           the view of both that clients read.
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
    checkpoints          jsonb NOT NULL DEFAULT '{}'
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

CREATE VIEW jobq.jobs AS
SELECT * FROM jobq.live_jobs
UNION ALL
SELECT * FROM jobq.finished_jobs;

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
    queue_hash         integer NOT NULL GENERATED ALWAYS AS (pg_catalog.hashtext(queue)) STORED
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
-- `queue_hash = hashtext($1) AND queue = $1`.
CREATE INDEX ready_by_queue ON jobq.ready (queue_hash, priority, run_at, id);
-- Checkout of any queue (queues => NULL) or of several queues walks this one.
CREATE INDEX ready_any ON jobq.ready (priority, run_at, id);
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
    checkpoints        jsonb
);

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
                                concurrency_limit, while_key, rate_key)
        SELECT j.queue, j.priority, j.run_at, j.id, j.kind,
               j.concurrency_key IS NOT NULL OR j.rate_key IS NOT NULL
                   OR coalesce(j.unique_strategy IN ('while_executing', 'until_executing'), false),
               j.concurrency_key, j.concurrency_limit,
               CASE WHEN j.unique_strategy = 'while_executing' THEN j.unique_key END, j.rate_key
          FROM jobq.live_jobs j
         WHERE j.id = ANY (ids) AND j.state = 'ready'
        RETURNING queue, priority, run_at, id
    )
    SELECT count(*) INTO v_groups
      FROM (SELECT jobq._lower_floor('jobq.ready'::regclass, i.queue, i.priority, i.run_at, min(i.id)),
                   jobq._wake(i.queue, i.run_at, count(*))  -- waiting checkouts, at commit
              FROM ins i
             GROUP BY i.queue, i.priority, i.run_at) g;
END $$;

-- Locks the ready row of waiting job `job` and returns its ctid; NULL when the job is not
-- waiting. Callers then lock the job row: ready row first, as checkout does, so that a
-- cancel or a replace never deadlocks with a checkout claiming the same job. The row is
-- found through ready_by_queue with the job row's values; if it changed or was claimed
-- between the two reads, look again.
CREATE FUNCTION jobq._lock_ready(job bigint) RETURNS tid
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    j     record;
    prev  text;   -- what the last look found: the same twice means no ready row to lock
    v     tid;
BEGIN
    LOOP
        SELECT x.queue, x.priority, x.run_at, x.state INTO j FROM jobq.live_jobs x WHERE x.id = job;
        IF NOT FOUND OR j.state <> 'ready' OR j::text = prev THEN
            RETURN NULL;
        END IF;
        SELECT r.ctid INTO v FROM jobq.ready r
         WHERE r.queue_hash = hashtext(j.queue) AND r.queue = j.queue
           AND r.priority = j.priority AND r.run_at = j.run_at AND r.id = job
           FOR UPDATE OF r;
        IF FOUND THEN
            RETURN v;
        END IF;
        prev := j::text;
    END LOOP;
END $$;

-- ---- src/sql/twins/bgworker.sql ----
-- Twin of src/bgworker.rs's `_serve_database`: there is no background worker to tell; the
-- passes are run by pg_cron (jobq_schedule_passes) or by the client libraries' workers
-- (src/sql/twins/edition.sql).
CREATE FUNCTION jobq._serve_database() RETURNS boolean
LANGUAGE plpgsql STRICT VOLATILE SET search_path = pg_catalog, jobq, pg_temp AS $$ BEGIN RETURN true; END $$;

-- Twin of `_pass_if_due`, called by every heartbeat: with no pg_cron and no background worker,
-- the workers that beat run the passes. One pass when the last one (by anyone: a heartbeat,
-- pg_cron, jobq_reap) ended more than jobq.reap_interval ago and no other heartbeat is running
-- one; its errors are logged, never the heartbeat's (jobq._reap_pass).
CREATE FUNCTION jobq._pass_if_due() RETURNS void
LANGUAGE plpgsql STRICT VOLATILE SET search_path = pg_catalog, jobq, pg_temp AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM jobq.last_pass p
                    WHERE p.ended_at > clock_timestamp() - jobq._setting('jobq.reap_interval', '1 s'))
       AND pg_try_advisory_xact_lock(1785684593, hashtext('jobq.pass')) THEN
        PERFORM jobq._reap_pass();
    END IF;
END $$;

-- ---- src/sql/twins/compact.sql ----
-- Twins of src/compact.rs. Compacting the hot tables with TRUNCATE is safe only with the
-- compacting transaction recorded in shared memory; the SQL edition never compacts
-- (jobq.compact_after() is 0), so there is nothing to record and nothing to wait for.
-- Called on every job's path: plain SQL without settings, which the planner inlines into the
-- calling statement (no call at run time); their callers pin the search_path.
CREATE FUNCTION jobq._note_compaction() RETURNS boolean
LANGUAGE sql VOLATILE AS $$ SELECT false $$;

CREATE FUNCTION jobq._hold_hot_tables() RETURNS void
LANGUAGE sql VOLATILE AS $$ SELECT NULL::void $$;

-- ---- src/sql/twins/counters.sql ----
-- Twins of src/counters.rs: per-queue, per-minute counts of what jobs did. The extension
-- notes them in shared memory and each pass moves them to jobq.queue_minutes; here each
-- event is a row of an unlogged table, which the pass takes the same way (rows of
-- transactions still open are taken by a later pass).
CREATE UNLOGGED TABLE jobq.tallies (
    queue  text NOT NULL,
    minute timestamptz NOT NULL,
    event  smallint NOT NULL,       -- 1 enqueued, 2 started, 3 completed, 4 failed, 5 dead
    took_us bigint                  -- wait (started) or run (completed, failed) time
);

-- The histograms' bucket bounds in milliseconds; the last is unbounded.
CREATE FUNCTION jobq.histogram_bounds() RETURNS double precision[]
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE SET search_path = pg_catalog, jobq, pg_temp AS $$
    SELECT '{1,2,5,10,20,50,100,200,500,1000,2000,5000,10000,20000,60000,120000,300000,600000,1800000,3600000,7200000,21600000,86400000,Infinity}'::double precision[]
$$;

-- On every job's path: it leaves the search_path to its callers, which pin it.
CREATE FUNCTION jobq._tally(queue text, event text, since timestamptz, at timestamptz) RETURNS boolean
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE AS $$
DECLARE
    v_event smallint := array_position(ARRAY['enqueued', 'started', 'completed', 'failed', 'dead'], event);
BEGIN
    IF v_event IS NULL THEN
        RAISE EXCEPTION 'jobq: unknown event "%"', event USING ERRCODE = '22023';
    END IF;
    IF length(queue) > 200 THEN
        RETURN false;
    END IF;
    INSERT INTO jobq.tallies VALUES (queue, to_timestamp(floor(extract(epoch FROM at) / 60) * 60), v_event,
        CASE WHEN since IS NOT NULL AND v_event IN (2, 3, 4)
             THEN greatest(0, (extract(epoch FROM at - since) * 1e6)::bigint) END);
    RETURN true;
END $$;

-- The bucket of a duration, 1-based: the first whose bound is at least d.
CREATE FUNCTION jobq._bucket_of(ms double precision) RETURNS integer
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE SET search_path = pg_catalog, jobq, pg_temp AS $$
    SELECT min(i)::integer FROM unnest(jobq.histogram_bounds()) WITH ORDINALITY b(bound, i) WHERE ms <= b.bound
$$;

CREATE FUNCTION jobq._histogram(ms double precision[]) RETURNS bigint[]
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE SET search_path = pg_catalog, jobq, pg_temp AS $$
    SELECT array_agg((SELECT count(*) FROM unnest(ms) m WHERE jobq._bucket_of(m) = i) ORDER BY i)
      FROM generate_series(1, 24) i
$$;

CREATE FUNCTION jobq._take_tallies()
RETURNS TABLE (queue text, minute timestamptz, enqueued bigint, started bigint, completed bigint, failed bigint,
               dead bigint, wait_ms bigint[], run_ms bigint[], wait_us bigint, run_us bigint)
LANGUAGE sql STRICT VOLATILE PARALLEL UNSAFE SET search_path = pg_catalog, jobq, pg_temp AS $$
    WITH taken AS (
        DELETE FROM jobq.tallies RETURNING *
    )
    SELECT t.queue, t.minute,
           count(*) FILTER (WHERE t.event = 1), count(*) FILTER (WHERE t.event = 2),
           count(*) FILTER (WHERE t.event = 3), count(*) FILTER (WHERE t.event = 4),
           count(*) FILTER (WHERE t.event = 5),
           jobq._histogram(coalesce(array_agg(t.took_us / 1000.0) FILTER (WHERE t.event = 2 AND t.took_us IS NOT NULL), '{}')),
           jobq._histogram(coalesce(array_agg(t.took_us / 1000.0) FILTER (WHERE t.event IN (3, 4) AND t.took_us IS NOT NULL), '{}')),
           coalesce(sum(t.took_us) FILTER (WHERE t.event = 2), 0)::bigint,
           coalesce(sum(t.took_us) FILTER (WHERE t.event IN (3, 4)), 0)::bigint
      FROM taken t
     GROUP BY t.queue, t.minute
$$;

CREATE FUNCTION jobq._histogram_add(a bigint[], b bigint[]) RETURNS bigint[]
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE SET search_path = pg_catalog, jobq, pg_temp AS $$
    SELECT coalesce(array_agg(coalesce(a[i], 0) + coalesce(b[i], 0) ORDER BY i), '{}')
      FROM generate_series(1, greatest(coalesce(array_length(a, 1), 0), coalesce(array_length(b, 1), 0))) i
$$;

-- The q-quantile, interpolated linearly inside its bucket (the unbounded last bucket answers
-- its lower bound); NULL when the histogram is empty.
CREATE FUNCTION jobq.histogram_quantile(hist bigint[], q double precision) RETURNS double precision
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_bounds double precision[] := jobq.histogram_bounds();
    v_total  bigint := (SELECT coalesce(sum(n), 0) FROM unnest(hist) n);
    v_rank   double precision := q * v_total;
    v_below  bigint := 0;
    v_lo     double precision;
    n        bigint;
BEGIN
    IF v_total <= 0 THEN
        RETURN NULL;
    END IF;
    FOR i IN 1 .. least(coalesce(array_length(hist, 1), 0), 24) LOOP
        n := coalesce(hist[i], 0);
        IF n > 0 AND v_below + n >= v_rank THEN
            v_lo := CASE WHEN i = 1 THEN 0 ELSE v_bounds[i - 1] END;
            IF v_bounds[i] = 'Infinity' THEN
                RETURN v_lo;
            END IF;
            RETURN v_lo + (v_bounds[i] - v_lo) * greatest(0, least(1, (v_rank - v_below) / n));
        END IF;
        v_below := v_below + n;
    END LOOP;
    RETURN v_bounds[23];
END $$;

-- ---- src/sql/twins/edges.sql ----
-- Twins of src/edges.rs. The extension notes in shared memory which databases have workflow
-- edges, and under REPEATABLE READ or SERIALIZABLE reads jobq.edges in the newest snapshot to
-- refuse (40001) a completion that cannot see a dependent enqueued after its snapshot. SQL
-- cannot read another snapshot: here such a completion notes its jobs, and the next reap pass,
-- under READ COMMITTED, tells the dependents it could not see (jobq._settle is idempotent:
-- it settles only the edges not yet settled).
CREATE TABLE jobq.settle_later (job_id bigint PRIMARY KEY);

CREATE FUNCTION jobq._note_edges() RETURNS void
LANGUAGE sql VOLATILE AS $$ SELECT NULL::void $$;

CREATE FUNCTION jobq._refuse_unseen_edges(parents bigint[]) RETURNS void
LANGUAGE plpgsql STRICT VOLATILE AS $$
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        INSERT INTO jobq.settle_later SELECT DISTINCT p FROM unnest(parents) p ON CONFLICT DO NOTHING;
    END IF;
END $$;

CREATE FUNCTION jobq._settle_unseen() RETURNS void
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_ids    bigint[];
    v_states text[];
BEGIN
    WITH taken AS (
        DELETE FROM jobq.settle_later s
         WHERE s.job_id = ANY (ARRAY(SELECT t.job_id FROM jobq.settle_later t ORDER BY t.job_id FOR UPDATE SKIP LOCKED))
        RETURNING s.job_id
    )
    SELECT array_agg(f.id ORDER BY f.id), array_agg(f.state ORDER BY f.id) INTO v_ids, v_states
      FROM taken t JOIN jobq.finished_jobs f ON f.id = t.job_id;
    PERFORM jobq._settle(v_ids, v_states);
END $$;

-- ---- src/sql/twins/floors.sql ----
-- Twins of src/floors.rs. Claim floors live in shared memory; without them checkout walks
-- the waiting set from its start, as the extension does without the preload.
-- Plain SQL without settings: the planner inlines them into the calling statement.
CREATE FUNCTION jobq._floor(ready oid, queue text)
RETURNS TABLE (priority integer, run_at timestamptz, id bigint)
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT (-2147483648)::integer, '-infinity'::timestamptz, (-9223372036854775808)::bigint
$$;

CREATE FUNCTION jobq._lower_floor(ready oid, queue text, priority integer, run_at timestamptz, id bigint)
RETURNS void
LANGUAGE sql VOLATILE PARALLEL UNSAFE AS $$ SELECT NULL::void $$;

-- ---- src/sql/twins/gucs.sql ----
-- Twins of src/gucs.rs. The extension defines the jobq.* settings; here they are custom
-- settings (ALTER DATABASE app SET jobq.retention = '2 days'), read at each call, the
-- contract's defaults when unset. A value is an interval ('30s', '1 day'); a bare number is
-- seconds, as the extension's settings read it.
-- Plain SQL without settings, inlined into the calling statement (each is on a job's path).
CREATE FUNCTION jobq._setting(name text, fallback interval) RETURNS interval
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT coalesce(nullif(pg_catalog.current_setting(name, true), '')::interval, fallback)
$$;

CREATE FUNCTION jobq.retention_ms() RETURNS bigint
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT (pg_catalog.date_part('epoch', jobq._setting('jobq.retention', '1 day')) * 1000)::bigint
$$;

-- Compaction needs shared memory (src/compact.rs): never, here.
CREATE FUNCTION jobq.compact_after() RETURNS bigint
LANGUAGE sql STABLE PARALLEL SAFE AS $$ SELECT 0::bigint $$;

-- ---- src/sql/twins/health.sql ----
-- Twins of src/health.rs: the last reap pass, for jobq.health. The extension keeps it in
-- shared memory; here one row of a table, written by each pass (jobq_reap).
CREATE TABLE jobq.last_pass (
    one            boolean PRIMARY KEY DEFAULT true CHECK (one),
    ended_at       timestamptz NOT NULL,
    took_ms        double precision NOT NULL,
    workers_reaped integer NOT NULL,
    jobs_requeued  integer NOT NULL,
    jobs_dead      integer NOT NULL,
    locks_released integer NOT NULL,
    jobs_pruned    integer NOT NULL,
    error          text
);

-- Skips the write when another pass holds the row: its note is as recent. Every pass ends
-- here: it also sends the NOTIFYs deferred since the last one (src/sql/twins/wakes.sql).
CREATE FUNCTION jobq._note_pass(ended timestamptz, took_us bigint, counts integer[], error text)
RETURNS void
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_sent bigint;
BEGIN
    WITH taken AS (
        DELETE FROM jobq.pending_notifies RETURNING queue
    )
    SELECT count(pg_notify('jobq', q.queue)) INTO v_sent FROM (SELECT DISTINCT t.queue FROM taken t) q;
    IF pg_try_advisory_xact_lock(1785684593, hashtext('jobq.last_pass')) THEN
        INSERT INTO jobq.last_pass AS p VALUES (true, ended, took_us / 1000.0, counts[1], counts[2], counts[3],
                                                counts[4], counts[5], error)
        ON CONFLICT (one) DO UPDATE
           SET ended_at = excluded.ended_at, took_ms = excluded.took_ms,
               workers_reaped = excluded.workers_reaped, jobs_requeued = excluded.jobs_requeued,
               jobs_dead = excluded.jobs_dead, locks_released = excluded.locks_released,
               jobs_pruned = excluded.jobs_pruned, error = excluded.error
         WHERE p.ended_at < excluded.ended_at;
    END IF;
END $$;

CREATE FUNCTION jobq._last_pass()
RETURNS TABLE (ended_at timestamptz, took_ms double precision, workers_reaped integer, jobs_requeued integer,
               jobs_dead integer, locks_released integer, jobs_pruned integer, error text)
LANGUAGE sql STRICT STABLE SET search_path = pg_catalog, jobq, pg_temp AS $$
    SELECT p.ended_at, p.took_ms, p.workers_reaped, p.jobs_requeued, p.jobs_dead, p.locks_released,
           p.jobs_pruned, p.error
      FROM jobq.last_pass p
$$;

-- ---- src/sql/twins/hot_path.sql ----
-- Twins of src/enqueue.rs, src/checkout.rs and src/complete.rs: the extension serves the
-- common enqueue, checkout and completion without a plan and hands every other case to the
-- SQL that serves them all (jobq._enqueue, jobq._checkout, jobq._complete). Here that SQL
-- serves every case.
-- Every twin is PL/pgSQL, not SQL: PL/pgSQL keeps its statements' plans for the session, where
-- a SQL function called from another statement is parsed and planned again at each call (that
-- cost a job ten times the extension's instructions: bench/results/instructions.md).
CREATE FUNCTION jobq_enqueue(
    queue             text,
    payload           jsonb       DEFAULT '{}',
    kind              text        DEFAULT NULL,
    priority          integer     DEFAULT 0,
    run_at            timestamptz DEFAULT NULL,
    max_attempts      integer     DEFAULT 25,
    unique_key        text        DEFAULT NULL,
    unique_strategy   text        DEFAULT 'until_executed',
    on_conflict       text        DEFAULT 'reject',
    concurrency_key   text        DEFAULT NULL,
    concurrency_limit integer     DEFAULT 1,
    rate_key          text        DEFAULT NULL,
    depends_on        bigint[]    DEFAULT NULL,
    on_parent_failure text        DEFAULT 'cancel'
) RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, jobq, pg_temp AS $$
BEGIN
    RETURN jobq._enqueue(queue, payload, kind, priority, run_at, max_attempts, unique_key, unique_strategy,
                         on_conflict, concurrency_key, concurrency_limit, rate_key, depends_on, on_parent_failure);
END $$;

CREATE FUNCTION jobq_checkout(worker uuid, queues text[] DEFAULT NULL, max_jobs integer DEFAULT 1,
                              wait interval DEFAULT NULL)
RETURNS SETOF jobq.job
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, jobq, pg_temp AS $$
BEGIN
    RETURN QUERY SELECT * FROM jobq._checkout(worker, queues, max_jobs, wait);
END $$;

CREATE FUNCTION jobq_complete(job_id bigint, worker uuid, result jsonb DEFAULT NULL) RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, jobq, pg_temp AS $$
BEGIN
    RETURN jobq._complete(job_id, worker, result);
END $$;

-- ---- src/sql/twins/liveness.sql ----
-- Twins of src/liveness.rs: the one liveness rule.
-- A worker is alive while its heartbeat is younger than jobq.heartbeat_timeout (read at each
-- call: a custom setting, 30 s when unset) and, when bound to its session, while a session
-- with that pid (and, where this role may see it, that start time) exists. The sessions are
-- read in the transaction's snapshot of them: a session that ended is seen gone by the next
-- transaction, so by the next reap pass at the latest.
CREATE FUNCTION jobq.worker_alive(heartbeat_at timestamptz, backend_pid integer, backend_start timestamptz)
RETURNS boolean
LANGUAGE plpgsql VOLATILE PARALLEL SAFE AS $$
BEGIN
    IF heartbeat_at IS NULL
       OR heartbeat_at <= clock_timestamp() - jobq._setting('jobq.heartbeat_timeout', '30 s') THEN
        RETURN false;
    END IF;
    RETURN backend_pid IS NULL
        OR EXISTS (SELECT 1 FROM pg_stat_get_activity(worker_alive.backend_pid) a
                    WHERE a.pid = worker_alive.backend_pid
                      AND (a.backend_start IS NULL OR worker_alive.backend_start IS NULL
                           OR a.backend_start = worker_alive.backend_start));
END $$;

-- Checkout's test: registered, alive, not stopping, and the caller may act for it. The common
-- case (a fresh heartbeat, no bound session, the caller's own worker) is decided here without
-- calling the two functions that decide the others (each call of a function with a pinned
-- search_path costs a job about 10 µs: bench/results/instructions.md, row jobq_sql).
-- These twins leave the search_path to their callers, jobq's functions, which pin it (as the
-- keyed claim's helpers of src/sql/checkout.sql do): no jobq role may call them.
CREATE FUNCTION jobq._usable_worker(worker uuid) RETURNS boolean
LANGUAGE plpgsql STRICT VOLATILE PARALLEL UNSAFE AS $$
DECLARE
    w jobq.workers;
BEGIN
    SELECT * INTO w FROM jobq.workers x WHERE x.id = worker;
    IF NOT FOUND OR w.stopping_at IS NOT NULL THEN
        RETURN false;
    END IF;
    IF w.backend_pid IS NULL AND w.heartbeat_at > clock_timestamp() - jobq._setting('jobq.heartbeat_timeout', '30 s')
       AND w.owner::oid = jobq._caller() THEN
        RETURN true;
    END IF;
    RETURN jobq.worker_alive(w.heartbeat_at, w.backend_pid, w.backend_start) AND jobq._may_act_for(w.owner);
END $$;

-- ---- src/sql/twins/privileges.sql ----
-- Twins of src/privileges.rs: who is calling, and whether it may act for a worker.
-- Inside a SECURITY DEFINER function current_user is the owner; the caller is the session's
-- role as SET ROLE last set it (the `role` setting), else the session's user.
-- Plain SQL without settings, inlined into the calling statement (on a job's path).
CREATE FUNCTION jobq._caller() RETURNS oid
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT pg_catalog.to_regrole(pg_catalog.quote_ident(
               CASE WHEN pg_catalog.current_setting('role') = 'none' THEN session_user::text
                    ELSE pg_catalog.current_setting('role') END))::oid
$$;

-- The caller is the worker's role, a member of jobq_admin, or a member of the role these
-- functions run as (the installing role); superusers are members of every role.
CREATE FUNCTION jobq._may_act_for(owner oid) RETURNS boolean
LANGUAGE plpgsql STRICT STABLE PARALLEL SAFE AS $$
DECLARE
    v_caller oid := jobq._caller();
BEGIN
    IF v_caller = owner OR owner = 0 THEN
        RETURN true;
    END IF;
    RETURN (to_regrole('jobq_admin') IS NOT NULL AND pg_has_role(v_caller, 'jobq_admin', 'MEMBER'))
        OR pg_has_role(v_caller, current_user, 'MEMBER');
END $$;

-- ---- src/sql/twins/schedules.sql ----
-- Twins of src/schedules.rs: when a schedule's ticks fall, in PL/pgSQL. jobq._cron_next and
-- jobq._cron_latest answer as the extension's Rust does (the croner crate's parser and
-- calendar walk, chrono-tz's zones), with the same errors (SQLSTATE 22023, the same texts);
-- scripts/check-cron-twin.sh compares the two on a large set of expressions, zones and times.
--
-- The steps, one function each:
--   jobq._cron_parse   the expression (five fields, six with seconds first, or a nickname)
--                      into a spec: a bitmap per field, as croner's parser builds it
--                      (jobq._cron_field parses one field, jobq._cron_number one number)
--   jobq._cron_zone    the time zone: an IANA name as chrono-tz knows it, else NULL
--   jobq._cron_month   which days of a month match (jobq._cron_days: of a given month)
--   jobq._cron_wall    the next (previous) matching wall-clock time, in the zone's local time
--   jobq._cron_resolve a wall-clock time to its instant(s): one, two (fall-back) or none (gap)
--   jobq._cron_tick    the first tick after (last at or before) an instant: jobq's DST rules
--
-- Ticks are wall-clock times that match, in the schedule's zone, each turned into an instant:
-- - a wall-clock time the zone repeats (fall-back) ticks once, at its first instant;
-- - a wall-clock time a spring-forward skips: a schedule of fixed times (one second, minute
--   and hour) ticks once at the first instant after the gap (if the day after the gap still
--   matches, as croner checks); any other schedule has no tick inside the gap.
-- Those instants grow with the wall-clock time, so the next tick after an instant is the tick
-- of the first matching wall-clock time past the instant's own (past the end of the repeated
-- range when the instant is in its second pass), and the latest tick the mirror of that.
--
-- Where the two may differ (scripts/check-cron-twin.sh shows the first apart):
-- - time zones: the same IANA names as chrono-tz 0.10.4 (tzdata 2025b), with PostgreSQL's copy
--   of their rules; chrono-tz has no daylight-saving time after 2099, PostgreSQL has;
-- - croner gives up past year 5000 (before year 1 backward); at that edge it still finds a
--   tick reached without a carry from within 5000-01-01 (0001-12-31), which this does not;
-- - the message for a character outside ASCII: upper() follows the database's LC_CTYPE (C:
--   ASCII only), Rust's to_uppercase() all of Unicode (ß, the ligatures ﬀ-ﬆ are copied);
-- - a time zone the server's tzdata lacks: PostgreSQL's own 22023 error.

-- The IANA name `time_zone` as PostgreSQL should be given it, or NULL when chrono-tz does not
-- know it. The names are chrono-tz 0.10.4's (tzdata 2025b): pg_timezone_names's, less posix/*,
-- Factory, localtime and posixrules, but a lookup there reads every zone file (30 ms).
-- PostgreSQL also takes POSIX-style strings, abbreviations and names in any case, which jobq
-- refuses. A name without a slash is given as the zone it links to: PostgreSQL looks a zone up
-- among abbreviations first (timezone_abbreviations), where CET, EET, MET and WET are fixed
-- offsets but zones with summer time in tzdata.
CREATE FUNCTION jobq._cron_zone(time_zone text) RETURNS text
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_zone text;
BEGIN
    IF NOT time_zone = ANY (ARRAY[
        'Africa/Abidjan', 'Africa/Accra', 'Africa/Addis_Ababa', 'Africa/Algiers', 'Africa/Asmara',
        'Africa/Asmera', 'Africa/Bamako', 'Africa/Bangui', 'Africa/Banjul', 'Africa/Bissau',
        'Africa/Blantyre', 'Africa/Brazzaville', 'Africa/Bujumbura', 'Africa/Cairo',
        'Africa/Casablanca', 'Africa/Ceuta', 'Africa/Conakry', 'Africa/Dakar',
        'Africa/Dar_es_Salaam', 'Africa/Djibouti', 'Africa/Douala', 'Africa/El_Aaiun',
        'Africa/Freetown', 'Africa/Gaborone', 'Africa/Harare', 'Africa/Johannesburg',
        'Africa/Juba', 'Africa/Kampala', 'Africa/Khartoum', 'Africa/Kigali', 'Africa/Kinshasa',
        'Africa/Lagos', 'Africa/Libreville', 'Africa/Lome', 'Africa/Luanda', 'Africa/Lubumbashi',
        'Africa/Lusaka', 'Africa/Malabo', 'Africa/Maputo', 'Africa/Maseru', 'Africa/Mbabane',
        'Africa/Mogadishu', 'Africa/Monrovia', 'Africa/Nairobi', 'Africa/Ndjamena',
        'Africa/Niamey', 'Africa/Nouakchott', 'Africa/Ouagadougou', 'Africa/Porto-Novo',
        'Africa/Sao_Tome', 'Africa/Timbuktu', 'Africa/Tripoli', 'Africa/Tunis', 'Africa/Windhoek',
        'America/Adak', 'America/Anchorage', 'America/Anguilla', 'America/Antigua',
        'America/Araguaina', 'America/Argentina/Buenos_Aires', 'America/Argentina/Catamarca',
        'America/Argentina/ComodRivadavia', 'America/Argentina/Cordoba', 'America/Argentina/Jujuy',
        'America/Argentina/La_Rioja', 'America/Argentina/Mendoza',
        'America/Argentina/Rio_Gallegos', 'America/Argentina/Salta', 'America/Argentina/San_Juan',
        'America/Argentina/San_Luis', 'America/Argentina/Tucuman', 'America/Argentina/Ushuaia',
        'America/Aruba', 'America/Asuncion', 'America/Atikokan', 'America/Atka', 'America/Bahia',
        'America/Bahia_Banderas', 'America/Barbados', 'America/Belem', 'America/Belize',
        'America/Blanc-Sablon', 'America/Boa_Vista', 'America/Bogota', 'America/Boise',
        'America/Buenos_Aires', 'America/Cambridge_Bay', 'America/Campo_Grande', 'America/Cancun',
        'America/Caracas', 'America/Catamarca', 'America/Cayenne', 'America/Cayman',
        'America/Chicago', 'America/Chihuahua', 'America/Ciudad_Juarez', 'America/Coral_Harbour',
        'America/Cordoba', 'America/Costa_Rica', 'America/Coyhaique', 'America/Creston',
        'America/Cuiaba', 'America/Curacao', 'America/Danmarkshavn', 'America/Dawson',
        'America/Dawson_Creek', 'America/Denver', 'America/Detroit', 'America/Dominica',
        'America/Edmonton', 'America/Eirunepe', 'America/El_Salvador', 'America/Ensenada',
        'America/Fort_Nelson', 'America/Fort_Wayne', 'America/Fortaleza', 'America/Glace_Bay',
        'America/Godthab', 'America/Goose_Bay', 'America/Grand_Turk', 'America/Grenada',
        'America/Guadeloupe', 'America/Guatemala', 'America/Guayaquil', 'America/Guyana',
        'America/Halifax', 'America/Havana', 'America/Hermosillo', 'America/Indiana/Indianapolis',
        'America/Indiana/Knox', 'America/Indiana/Marengo', 'America/Indiana/Petersburg',
        'America/Indiana/Tell_City', 'America/Indiana/Vevay', 'America/Indiana/Vincennes',
        'America/Indiana/Winamac', 'America/Indianapolis', 'America/Inuvik', 'America/Iqaluit',
        'America/Jamaica', 'America/Jujuy', 'America/Juneau', 'America/Kentucky/Louisville',
        'America/Kentucky/Monticello', 'America/Knox_IN', 'America/Kralendijk', 'America/La_Paz',
        'America/Lima', 'America/Los_Angeles', 'America/Louisville', 'America/Lower_Princes',
        'America/Maceio', 'America/Managua', 'America/Manaus', 'America/Marigot',
        'America/Martinique', 'America/Matamoros', 'America/Mazatlan', 'America/Mendoza',
        'America/Menominee', 'America/Merida', 'America/Metlakatla', 'America/Mexico_City',
        'America/Miquelon', 'America/Moncton', 'America/Monterrey', 'America/Montevideo',
        'America/Montreal', 'America/Montserrat', 'America/Nassau', 'America/New_York',
        'America/Nipigon', 'America/Nome', 'America/Noronha', 'America/North_Dakota/Beulah',
        'America/North_Dakota/Center', 'America/North_Dakota/New_Salem', 'America/Nuuk',
        'America/Ojinaga', 'America/Panama', 'America/Pangnirtung', 'America/Paramaribo',
        'America/Phoenix', 'America/Port-au-Prince', 'America/Port_of_Spain', 'America/Porto_Acre',
        'America/Porto_Velho', 'America/Puerto_Rico', 'America/Punta_Arenas',
        'America/Rainy_River', 'America/Rankin_Inlet', 'America/Recife', 'America/Regina',
        'America/Resolute', 'America/Rio_Branco', 'America/Rosario', 'America/Santa_Isabel',
        'America/Santarem', 'America/Santiago', 'America/Santo_Domingo', 'America/Sao_Paulo',
        'America/Scoresbysund', 'America/Shiprock', 'America/Sitka', 'America/St_Barthelemy',
        'America/St_Johns', 'America/St_Kitts', 'America/St_Lucia', 'America/St_Thomas',
        'America/St_Vincent', 'America/Swift_Current', 'America/Tegucigalpa', 'America/Thule',
        'America/Thunder_Bay', 'America/Tijuana', 'America/Toronto', 'America/Tortola',
        'America/Vancouver', 'America/Virgin', 'America/Whitehorse', 'America/Winnipeg',
        'America/Yakutat', 'America/Yellowknife', 'Antarctica/Casey', 'Antarctica/Davis',
        'Antarctica/DumontDUrville', 'Antarctica/Macquarie', 'Antarctica/Mawson',
        'Antarctica/McMurdo', 'Antarctica/Palmer', 'Antarctica/Rothera', 'Antarctica/South_Pole',
        'Antarctica/Syowa', 'Antarctica/Troll', 'Antarctica/Vostok', 'Arctic/Longyearbyen',
        'Asia/Aden', 'Asia/Almaty', 'Asia/Amman', 'Asia/Anadyr', 'Asia/Aqtau', 'Asia/Aqtobe',
        'Asia/Ashgabat', 'Asia/Ashkhabad', 'Asia/Atyrau', 'Asia/Baghdad', 'Asia/Bahrain',
        'Asia/Baku', 'Asia/Bangkok', 'Asia/Barnaul', 'Asia/Beirut', 'Asia/Bishkek', 'Asia/Brunei',
        'Asia/Calcutta', 'Asia/Chita', 'Asia/Choibalsan', 'Asia/Chongqing', 'Asia/Chungking',
        'Asia/Colombo', 'Asia/Dacca', 'Asia/Damascus', 'Asia/Dhaka', 'Asia/Dili', 'Asia/Dubai',
        'Asia/Dushanbe', 'Asia/Famagusta', 'Asia/Gaza', 'Asia/Harbin', 'Asia/Hebron',
        'Asia/Ho_Chi_Minh', 'Asia/Hong_Kong', 'Asia/Hovd', 'Asia/Irkutsk', 'Asia/Istanbul',
        'Asia/Jakarta', 'Asia/Jayapura', 'Asia/Jerusalem', 'Asia/Kabul', 'Asia/Kamchatka',
        'Asia/Karachi', 'Asia/Kashgar', 'Asia/Kathmandu', 'Asia/Katmandu', 'Asia/Khandyga',
        'Asia/Kolkata', 'Asia/Krasnoyarsk', 'Asia/Kuala_Lumpur', 'Asia/Kuching', 'Asia/Kuwait',
        'Asia/Macao', 'Asia/Macau', 'Asia/Magadan', 'Asia/Makassar', 'Asia/Manila', 'Asia/Muscat',
        'Asia/Nicosia', 'Asia/Novokuznetsk', 'Asia/Novosibirsk', 'Asia/Omsk', 'Asia/Oral',
        'Asia/Phnom_Penh', 'Asia/Pontianak', 'Asia/Pyongyang', 'Asia/Qatar', 'Asia/Qostanay',
        'Asia/Qyzylorda', 'Asia/Rangoon', 'Asia/Riyadh', 'Asia/Saigon', 'Asia/Sakhalin',
        'Asia/Samarkand', 'Asia/Seoul', 'Asia/Shanghai', 'Asia/Singapore', 'Asia/Srednekolymsk',
        'Asia/Taipei', 'Asia/Tashkent', 'Asia/Tbilisi', 'Asia/Tehran', 'Asia/Tel_Aviv',
        'Asia/Thimbu', 'Asia/Thimphu', 'Asia/Tokyo', 'Asia/Tomsk', 'Asia/Ujung_Pandang',
        'Asia/Ulaanbaatar', 'Asia/Ulan_Bator', 'Asia/Urumqi', 'Asia/Ust-Nera', 'Asia/Vientiane',
        'Asia/Vladivostok', 'Asia/Yakutsk', 'Asia/Yangon', 'Asia/Yekaterinburg', 'Asia/Yerevan',
        'Atlantic/Azores', 'Atlantic/Bermuda', 'Atlantic/Canary', 'Atlantic/Cape_Verde',
        'Atlantic/Faeroe', 'Atlantic/Faroe', 'Atlantic/Jan_Mayen', 'Atlantic/Madeira',
        'Atlantic/Reykjavik', 'Atlantic/South_Georgia', 'Atlantic/St_Helena', 'Atlantic/Stanley',
        'Australia/ACT', 'Australia/Adelaide', 'Australia/Brisbane', 'Australia/Broken_Hill',
        'Australia/Canberra', 'Australia/Currie', 'Australia/Darwin', 'Australia/Eucla',
        'Australia/Hobart', 'Australia/LHI', 'Australia/Lindeman', 'Australia/Lord_Howe',
        'Australia/Melbourne', 'Australia/NSW', 'Australia/North', 'Australia/Perth',
        'Australia/Queensland', 'Australia/South', 'Australia/Sydney', 'Australia/Tasmania',
        'Australia/Victoria', 'Australia/West', 'Australia/Yancowinna', 'Brazil/Acre',
        'Brazil/DeNoronha', 'Brazil/East', 'Brazil/West', 'CET', 'CST6CDT', 'Canada/Atlantic',
        'Canada/Central', 'Canada/Eastern', 'Canada/Mountain', 'Canada/Newfoundland',
        'Canada/Pacific', 'Canada/Saskatchewan', 'Canada/Yukon', 'Chile/Continental',
        'Chile/EasterIsland', 'Cuba', 'EET', 'EST', 'EST5EDT', 'Egypt', 'Eire', 'Etc/GMT',
        'Etc/GMT+0', 'Etc/GMT+1', 'Etc/GMT+10', 'Etc/GMT+11', 'Etc/GMT+12', 'Etc/GMT+2',
        'Etc/GMT+3', 'Etc/GMT+4', 'Etc/GMT+5', 'Etc/GMT+6', 'Etc/GMT+7', 'Etc/GMT+8', 'Etc/GMT+9',
        'Etc/GMT-0', 'Etc/GMT-1', 'Etc/GMT-10', 'Etc/GMT-11', 'Etc/GMT-12', 'Etc/GMT-13',
        'Etc/GMT-14', 'Etc/GMT-2', 'Etc/GMT-3', 'Etc/GMT-4', 'Etc/GMT-5', 'Etc/GMT-6', 'Etc/GMT-7',
        'Etc/GMT-8', 'Etc/GMT-9', 'Etc/GMT0', 'Etc/Greenwich', 'Etc/UCT', 'Etc/UTC',
        'Etc/Universal', 'Etc/Zulu', 'Europe/Amsterdam', 'Europe/Andorra', 'Europe/Astrakhan',
        'Europe/Athens', 'Europe/Belfast', 'Europe/Belgrade', 'Europe/Berlin', 'Europe/Bratislava',
        'Europe/Brussels', 'Europe/Bucharest', 'Europe/Budapest', 'Europe/Busingen',
        'Europe/Chisinau', 'Europe/Copenhagen', 'Europe/Dublin', 'Europe/Gibraltar',
        'Europe/Guernsey', 'Europe/Helsinki', 'Europe/Isle_of_Man', 'Europe/Istanbul',
        'Europe/Jersey', 'Europe/Kaliningrad', 'Europe/Kiev', 'Europe/Kirov', 'Europe/Kyiv',
        'Europe/Lisbon', 'Europe/Ljubljana', 'Europe/London', 'Europe/Luxembourg', 'Europe/Madrid',
        'Europe/Malta', 'Europe/Mariehamn', 'Europe/Minsk', 'Europe/Monaco', 'Europe/Moscow',
        'Europe/Nicosia', 'Europe/Oslo', 'Europe/Paris', 'Europe/Podgorica', 'Europe/Prague',
        'Europe/Riga', 'Europe/Rome', 'Europe/Samara', 'Europe/San_Marino', 'Europe/Sarajevo',
        'Europe/Saratov', 'Europe/Simferopol', 'Europe/Skopje', 'Europe/Sofia', 'Europe/Stockholm',
        'Europe/Tallinn', 'Europe/Tirane', 'Europe/Tiraspol', 'Europe/Ulyanovsk',
        'Europe/Uzhgorod', 'Europe/Vaduz', 'Europe/Vatican', 'Europe/Vienna', 'Europe/Vilnius',
        'Europe/Volgograd', 'Europe/Warsaw', 'Europe/Zagreb', 'Europe/Zaporozhye', 'Europe/Zurich',
        'GB', 'GB-Eire', 'GMT', 'GMT+0', 'GMT-0', 'GMT0', 'Greenwich', 'HST', 'Hongkong',
        'Iceland', 'Indian/Antananarivo', 'Indian/Chagos', 'Indian/Christmas', 'Indian/Cocos',
        'Indian/Comoro', 'Indian/Kerguelen', 'Indian/Mahe', 'Indian/Maldives', 'Indian/Mauritius',
        'Indian/Mayotte', 'Indian/Reunion', 'Iran', 'Israel', 'Jamaica', 'Japan', 'Kwajalein',
        'Libya', 'MET', 'MST', 'MST7MDT', 'Mexico/BajaNorte', 'Mexico/BajaSur', 'Mexico/General',
        'NZ', 'NZ-CHAT', 'Navajo', 'PRC', 'PST8PDT', 'Pacific/Apia', 'Pacific/Auckland',
        'Pacific/Bougainville', 'Pacific/Chatham', 'Pacific/Chuuk', 'Pacific/Easter',
        'Pacific/Efate', 'Pacific/Enderbury', 'Pacific/Fakaofo', 'Pacific/Fiji',
        'Pacific/Funafuti', 'Pacific/Galapagos', 'Pacific/Gambier', 'Pacific/Guadalcanal',
        'Pacific/Guam', 'Pacific/Honolulu', 'Pacific/Johnston', 'Pacific/Kanton',
        'Pacific/Kiritimati', 'Pacific/Kosrae', 'Pacific/Kwajalein', 'Pacific/Majuro',
        'Pacific/Marquesas', 'Pacific/Midway', 'Pacific/Nauru', 'Pacific/Niue', 'Pacific/Norfolk',
        'Pacific/Noumea', 'Pacific/Pago_Pago', 'Pacific/Palau', 'Pacific/Pitcairn',
        'Pacific/Pohnpei', 'Pacific/Ponape', 'Pacific/Port_Moresby', 'Pacific/Rarotonga',
        'Pacific/Saipan', 'Pacific/Samoa', 'Pacific/Tahiti', 'Pacific/Tarawa', 'Pacific/Tongatapu',
        'Pacific/Truk', 'Pacific/Wake', 'Pacific/Wallis', 'Pacific/Yap', 'Poland', 'Portugal',
        'ROC', 'ROK', 'Singapore', 'Turkey', 'UCT', 'US/Alaska', 'US/Aleutian', 'US/Arizona',
        'US/Central', 'US/East-Indiana', 'US/Eastern', 'US/Hawaii', 'US/Indiana-Starke',
        'US/Michigan', 'US/Mountain', 'US/Pacific', 'US/Samoa', 'UTC', 'Universal', 'W-SU', 'WET',
        'Zulu'
    ]) THEN
        RETURN NULL;
    END IF;
    v_zone := CASE time_zone
        WHEN 'CET' THEN 'Europe/Brussels'       WHEN 'CST6CDT' THEN 'America/Chicago'
        WHEN 'Cuba' THEN 'America/Havana'       WHEN 'EET' THEN 'Europe/Athens'
        WHEN 'EST' THEN 'America/Panama'        WHEN 'EST5EDT' THEN 'America/New_York'
        WHEN 'Egypt' THEN 'Africa/Cairo'        WHEN 'Eire' THEN 'Europe/Dublin'
        WHEN 'GB' THEN 'Europe/London'          WHEN 'GB-Eire' THEN 'Europe/London'
        WHEN 'GMT' THEN 'Etc/GMT'               WHEN 'GMT+0' THEN 'Etc/GMT'
        WHEN 'GMT-0' THEN 'Etc/GMT'             WHEN 'GMT0' THEN 'Etc/GMT'
        WHEN 'Greenwich' THEN 'Etc/GMT'         WHEN 'HST' THEN 'Pacific/Honolulu'
        WHEN 'Hongkong' THEN 'Asia/Hong_Kong'   WHEN 'Iceland' THEN 'Africa/Abidjan'
        WHEN 'Iran' THEN 'Asia/Tehran'          WHEN 'Israel' THEN 'Asia/Jerusalem'
        WHEN 'Jamaica' THEN 'America/Jamaica'   WHEN 'Japan' THEN 'Asia/Tokyo'
        WHEN 'Kwajalein' THEN 'Pacific/Kwajalein' WHEN 'Libya' THEN 'Africa/Tripoli'
        WHEN 'MET' THEN 'Europe/Brussels'       WHEN 'MST' THEN 'America/Phoenix'
        WHEN 'MST7MDT' THEN 'America/Denver'    WHEN 'NZ' THEN 'Pacific/Auckland'
        WHEN 'NZ-CHAT' THEN 'Pacific/Chatham'   WHEN 'Navajo' THEN 'America/Denver'
        WHEN 'PRC' THEN 'Asia/Shanghai'         WHEN 'PST8PDT' THEN 'America/Los_Angeles'
        WHEN 'Poland' THEN 'Europe/Warsaw'      WHEN 'Portugal' THEN 'Europe/Lisbon'
        WHEN 'ROC' THEN 'Asia/Taipei'           WHEN 'ROK' THEN 'Asia/Seoul'
        WHEN 'Singapore' THEN 'Asia/Singapore'  WHEN 'Turkey' THEN 'Europe/Istanbul'
        WHEN 'UCT' THEN 'Etc/UTC'               WHEN 'UTC' THEN 'Etc/UTC'
        WHEN 'Universal' THEN 'Etc/UTC'         WHEN 'W-SU' THEN 'Europe/Moscow'
        WHEN 'WET' THEN 'Europe/Lisbon'         WHEN 'Zulu' THEN 'Etc/UTC'
        ELSE time_zone END;
    -- (A server whose tzdata lacks the zone refuses it at its first conversion, with 22023 and
    -- its own text: catching that would take a subtransaction, which a parallel worker cannot.)
    RETURN v_zone;
END $$;

-- A number as Rust's str::parse of an unsigned integer reads it (digits only, any leading
-- zeros, at most `max`: 65535 for croner's u16, 255 for its u8), else NULL.
CREATE FUNCTION jobq._cron_number(s text, max integer) RETURNS integer
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE SET search_path = pg_catalog, jobq, pg_temp AS $$
BEGIN
    RETURN CASE WHEN s ~ '^[0-9]+$' AND length(ltrim(s, '0')) <= 5 AND ('0' || ltrim(s, '0'))::integer <= max
                THEN ('0' || ltrim(s, '0'))::integer END;
END $$;

-- A bitmap (a string of '0' and '1') of `len` positions with '1' at `first`, `first` + `step`,
-- ... up to `last` (positions count from 1), ORed into `bits`.
CREATE FUNCTION jobq._cron_bits(bits text, first integer, last integer, step integer) RETURNS text
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE SET search_path = pg_catalog, jobq, pg_temp AS $$
BEGIN
    RETURN (bits::varbit
            | (repeat('0', first - 1)
               || left(repeat('1' || repeat('0', step - 1), (last - first) / step + 1), last - first + 1)
               || repeat('0', length(bits) - last))::varbit)::text;
END $$;

-- One field of the expression, as croner's CronComponent::parse reads it: `lo`..`hi` its
-- values, `kind` 'dom' (day of month: W and L allowed), 'dow' (day of week: # and L allowed)
-- or 'plain'. Out: bitmaps ('1' at 1 + value - lo) of the values it matches (all_b) and of
-- the days of month with W (w_b); for the day of week, n#k (nth_b, at value * 5 + k) and nL
-- (last_b, at 1 + value); whether L (l_feature) or LW (w_feature too) was given alone; the
-- step of its last stepped part and whether it used * (what makes a schedule of fixed times);
-- or croner's error text (err).
CREATE FUNCTION jobq._cron_field(field text, lo integer, hi integer, kind text,
    OUT all_b text, OUT w_b text, OUT nth_b text, OUT last_b text,
    OUT l_feature boolean, OUT w_feature boolean, OUT step integer, OUT wildcard boolean, OUT err text)
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_part   text;
    v_mode   text;      -- 'step', 'range', 'number'
    v_bit    integer;   -- 0: the value, 1..5: #n, 6: L
    v_clean  text;      -- the part without its #n
    v_items  text[];
    v_a      integer;
    v_b      integer;
    v_s      integer;
BEGIN
    all_b := repeat('0', hi - lo + 1);
    w_b := all_b;
    nth_b := repeat('0', 40);
    last_b := repeat('0', 8);
    l_feature := false;
    w_feature := false;
    step := 1;
    wildcard := false;
    IF field = '*' THEN
        wildcard := true;
        all_b := repeat('1', hi - lo + 1);
        RETURN;
    END IF;
    FOREACH v_part IN ARRAY string_to_array(field, ',') LOOP
        CONTINUE WHEN v_part = '';
        IF strpos(v_part, '/') > 0 THEN
            v_mode := 'step';
        ELSIF strpos(v_part, '-') > 0 THEN
            v_mode := 'range';
        ELSIF strpos(v_part, 'W') > 0 THEN
            -- nW: the weekday closest to day n; LW: the last weekday of the month.
            IF split_part(v_part, 'W', 1) = 'L' THEN
                l_feature := true;
                w_feature := true;
                CONTINUE;
            END IF;
            v_a := jobq._cron_number(split_part(v_part, 'W', 1), 65535);
            IF v_a IS NULL THEN
                err := 'Component error: Invalid day for closest weekday.';
                RETURN;
            ELSIF v_a < lo OR v_a > hi THEN
                err := 'Component error: Day for closest weekday out of bounds.';
                RETURN;
            END IF;
            w_b := jobq._cron_bits(w_b, v_a - lo + 1, v_a - lo + 1, 1);
            CONTINUE;
        ELSIF v_part = 'L' THEN
            l_feature := true;   -- the last day of the month (alone in the day of week: nothing)
            CONTINUE;
        ELSE
            IF right(v_part, 1) = 'L' AND strpos(v_part, '#') = 0 THEN
                v_part := replace(v_part, 'L', '#L');   -- 5L: the last Friday
            END IF;
            IF strpos(v_part, '#') > 0 AND kind <> 'dow' THEN
                err := 'Component error: Nth specifier # not allowed in the current field.';
                RETURN;
            ELSIF strpos(v_part, 'L') > 0 AND kind <> 'dow' THEN
                err := 'Component error: L not allowed in the current field.';
                RETURN;
            END IF;
            v_mode := 'number';
        END IF;
        -- Which bit the part sets: L (last), #n (nth) or the plain value.
        IF right(v_part, 1) = 'L' THEN
            v_bit := 6;
        ELSIF strpos(v_part, '#') > 0 THEN
            v_bit := jobq._cron_number(substr(v_part, strpos(v_part, '#') + 1), 255);
            IF v_bit IS NULL THEN
                err := 'Component error: Invalid nth specifier.';
                RETURN;
            ELSIF v_bit = 0 OR v_bit > 5 THEN
                err := 'Component error: Nth specifier out of bounds.';
                RETURN;
            END IF;
        ELSE
            v_bit := 0;
        END IF;
        v_clean := split_part(v_part, '#', 1);
        IF v_mode = 'number' THEN
            v_a := jobq._cron_number(v_clean, 65535);
            IF v_a IS NULL THEN
                err := 'Component error: Invalid number.';
                RETURN;
            ELSIF v_a < lo OR v_a > hi THEN
                err := 'Component error: Number out of bounds.';
                RETURN;
            END IF;
            v_b := v_a;
            v_s := 1;
        ELSIF v_mode = 'range' THEN
            v_items := string_to_array(v_clean, '-');
            IF cardinality(v_items) <> 2 THEN
                err := 'Component error: Invalid range syntax.';
                RETURN;
            END IF;
            v_a := jobq._cron_number(v_items[1], 65535);
            v_b := jobq._cron_number(v_items[2], 65535);
            IF v_a IS NULL THEN
                err := 'Component error: Invalid start of range.';
                RETURN;
            ELSIF v_b IS NULL THEN
                err := 'Component error: Invalid end of range.';
                RETURN;
            ELSIF v_a > v_b OR v_a < lo OR v_b > hi THEN
                err := 'Component error: Range out of bounds.';
                RETURN;
            END IF;
            v_s := 1;
        ELSE
            v_items := string_to_array(v_clean, '/');
            IF cardinality(v_items) <> 2 THEN
                err := 'Component error: Invalid stepped range syntax.';
                RETURN;
            END IF;
            v_s := jobq._cron_number(v_items[2], 65535);
            IF v_s IS NULL THEN
                err := 'Component error: Invalid step.';
                RETURN;
            END IF;
            step := v_s;
            IF v_s = 0 THEN
                err := 'Component error: Step cannot be zero.';
                RETURN;
            END IF;
            IF v_items[1] = '*' THEN
                wildcard := true;
                v_a := lo;
                v_b := hi;
            ELSIF strpos(v_items[1], '-') > 0 THEN
                IF cardinality(string_to_array(v_items[1], '-')) <> 2 THEN
                    err := 'Component error: Invalid range syntax in stepping.';
                    RETURN;
                END IF;
                v_a := jobq._cron_number(split_part(v_items[1], '-', 1), 65535);
                v_b := jobq._cron_number(split_part(v_items[1], '-', 2), 65535);
                IF v_a IS NULL THEN
                    err := 'Component error: Invalid range start.';
                    RETURN;
                ELSIF v_b IS NULL THEN
                    err := 'Component error: Invalid range end.';
                    RETURN;
                END IF;
            ELSIF v_items[1] = '' THEN
                err := format('Component error: Invalid step syntax: omitting the starting point like "/%1$s" is not allowed. Use "*/%1$s" for wildcard steps or "X-Y/%1$s" for range steps.', v_items[2]);
                RETURN;
            ELSE
                err := format('Component error: Invalid step syntax: single number steps like "%1$s/%2$s" are not allowed. Use "*/%2$s" for wildcard steps or "X-Y/%2$s" for range steps.', v_items[1], v_items[2]);
                RETURN;
            END IF;
            IF v_a < lo OR v_b > hi OR v_a > v_b THEN
                err := 'Component error: Range is out of bounds in stepping.';
                RETURN;
            END IF;
            -- croner counts in u16: a step past 65535 from the last value is an error.
            IF v_a + (v_b - v_a) / v_s * v_s + v_s > 65535 THEN
                err := 'Component error: Value exceeded max after stepping.';
                RETURN;
            END IF;
        END IF;
        -- The bit on v_a, v_a + v_s, ... up to v_b.
        IF v_bit = 0 THEN
            all_b := jobq._cron_bits(all_b, v_a - lo + 1, v_b - lo + 1, v_s);
        ELSIF v_bit = 6 THEN
            last_b := jobq._cron_bits(last_b, v_a + 1, v_b + 1, v_s);
        ELSE
            nth_b := jobq._cron_bits(nth_b, v_a * 5 + v_bit, v_b * 5 + v_bit, v_s * 5);
        END IF;
    END LOOP;
END $$;

-- The expression `cron`, checked as src/schedules.rs checks it (Schedule::parse) and parsed as
-- croner's CronParser (seconds optional, no year field) parses it, into a spec:
--   [1] seconds, [2] minutes (60 characters each, '1' at 1 + the value), [3] hours (24),
--   [4] days of month (31, at the day), [5] months (12, at the month),
--   [6] days of week (7, at 1 + the weekday, 0 = Sunday), [7] #n days of week (35, at
--   weekday * 5 + n), [8] L days of week (7), [9] W days of month (31),
--   [10] six flags: L alone, LW, day of month *, day of week *, both days must match (a '+'
--   before the day of week), fixed time (one second, one minute and one hour, none of them
--   by * or a step).
-- Raises 22023 for an expression that is not one, with the Rust's texts.
CREATE FUNCTION jobq._cron_parse(cron text) RETURNS text[]
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    -- Rust's whitespace (char::is_whitespace), which trim() and split_whitespace() go by.
    c_space  constant text := '[\t\n\v\f\r \u0085\u00A0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000]+';
    v_expr   text := regexp_replace(cron, '^' || c_space || '|' || c_space || '$', '', 'g');
    v_upper  text;
    v_parts  text[];
    v_n      integer;
    v_and    boolean := false;
    v_allowed text;
    v_ch     text;
    f        record;
    v_spec   text[] := '{}';
    v_flags  text;
    v_fixed  boolean := true;
BEGIN
    -- jobq's own checks, with its texts.
    v_n := CASE WHEN v_expr = '' THEN 0 ELSE cardinality(regexp_split_to_array(v_expr, c_space)) END;
    IF left(v_expr, 1) = '@' THEN
        IF translate(v_expr, 'ABCDEFGHIJKLMNOPQRSTUVWXYZ', 'abcdefghijklmnopqrstuvwxyz')
           NOT IN ('@yearly', '@annually', '@monthly', '@weekly', '@daily', '@hourly') THEN
            RAISE EXCEPTION 'jobq: unknown cron nickname "%" (use @yearly, @annually, @monthly, @weekly, @daily or @hourly)', v_expr
                USING ERRCODE = '22023';
        END IF;
    ELSIF v_n NOT IN (5, 6) THEN
        RAISE EXCEPTION 'jobq: cron expression "%" has % fields: it needs five (minute hour day-of-month month day-of-week) or six (seconds first)', v_expr, v_n
            USING ERRCODE = '22023';
    END IF;

    -- croner: upper case (Rust's: ß is SS, ligatures are their letters), nicknames, names of
    -- days and months, then the fields.
    v_upper := upper(replace(replace(replace(replace(replace(replace(replace(replace(v_expr,
                   'ß', 'SS'), 'ﬀ', 'FF'), 'ﬁ', 'FI'), 'ﬂ', 'FL'), 'ﬃ', 'FFI'), 'ﬄ', 'FFL'), 'ﬅ', 'ST'), 'ﬆ', 'ST'));
    v_parts := regexp_split_to_array(CASE v_upper
            WHEN '@YEARLY' THEN '0 0 1 1 *' WHEN '@ANNUALLY' THEN '0 0 1 1 *'
            WHEN '@MONTHLY' THEN '0 0 1 * *' WHEN '@WEEKLY' THEN '0 0 * * 0'
            WHEN '@DAILY' THEN '0 0 * * *' WHEN '@HOURLY' THEN '0 * * * *'
            ELSE replace(replace(replace(replace(replace(replace(replace(replace(replace(replace(replace(
                 replace(replace(replace(replace(replace(replace(replace(replace(replace(
                     v_upper, '-SUN', '-7'), 'SUN', '0'), 'MON', '1'), 'TUE', '2'), 'WED', '3'),
                     'THU', '4'), 'FRI', '5'), 'SAT', '6'),
                     'JAN', '1'), 'FEB', '2'), 'MAR', '3'), 'APR', '4'), 'MAY', '5'), 'JUN', '6'),
                     'JUL', '7'), 'AUG', '8'), 'SEP', '9'), 'OCT', '10'), 'NOV', '11'), 'DEC', '12')
        END, c_space);
    IF cardinality(v_parts) = 5 THEN
        v_parts := '0'::text || v_parts;     -- the seconds field, when omitted
    END IF;
    v_parts := v_parts || '*'::text;   -- the year field, always *
    -- ? is * in the day fields; a '+' before the day of week asks both day fields to match.
    v_parts[4] := replace(v_parts[4], '?', '*');
    v_parts[6] := replace(v_parts[6], '?', '*');
    IF left(v_parts[6], 1) = '+' THEN
        v_and := true;
        v_parts[6] := substr(v_parts[6], 2);
    END IF;
    FOR i IN 1..7 LOOP
        v_allowed := '*/0123456789,-' || CASE i WHEN 4 THEN 'LW?' WHEN 6 THEN '#L?' ELSE '' END;
        v_ch := substring(v_parts[i] FROM '[^' || replace(v_allowed, '-', '') || '-]');
        IF v_ch IS NOT NULL THEN
            RAISE EXCEPTION 'jobq: invalid cron expression "%": Pattern contains illegal characters: CronPattern contains illegal character ''%'' in part ''%''', v_expr, v_ch, v_parts[i]
                USING ERRCODE = '22023';
        END IF;
    END LOOP;

    -- The fields, in croner's order (its first error is the one reported).
    FOR i IN 1..6 LOOP
        f := jobq._cron_field(v_parts[i], (ARRAY[0, 0, 0, 1, 1, 0])[i], (ARRAY[59, 59, 23, 31, 12, 7])[i],
                              (ARRAY['plain', 'plain', 'plain', 'dom', 'plain', 'dow'])[i]);
        IF f.err IS NOT NULL THEN
            RAISE EXCEPTION 'jobq: invalid cron expression "%": %', v_expr, f.err USING ERRCODE = '22023';
        END IF;
        v_spec[i] := f.all_b;
        v_fixed := v_fixed AND (i > 3 OR (f.step = 1 AND NOT f.wildcard AND length(replace(f.all_b, '0', '')) = 1));
        IF i = 4 THEN
            v_spec[9] := f.w_b;
            v_flags := concat(f.l_feature::integer, f.w_feature::integer);
        ELSIF i = 6 THEN
            -- Day of week 7 is Sunday, 0.
            v_spec[6] := (left(f.all_b, 1)::varbit | right(f.all_b, 1)::varbit)::text || substr(f.all_b, 2, 6);
            v_spec[7] := (left(f.nth_b, 5)::varbit | right(f.nth_b, 5)::varbit)::text || substr(f.nth_b, 6, 30);
            v_spec[8] := (left(f.last_b, 1)::varbit | right(f.last_b, 1)::varbit)::text || substr(f.last_b, 2, 6);
        END IF;
    END LOOP;
    v_spec[10] := concat(v_flags, (v_parts[4] = '*')::integer, (v_parts[6] = '*')::integer, v_and::integer,
                         v_fixed::integer);
    RETURN v_spec;
END $$;

-- The days of a month of `len` days whose 1st is weekday `wd1` (0 = Sunday) that `spec`
-- matches, as a string of `len` characters, '1' at each matching day: croner's day_match.
-- Day of month: the day, L (the last day), LW (the last weekday), nW (the weekday closest to
-- day n, in the month). Day of week: the weekday, n#k (its k-th in the month), nL (its last).
-- When both fields are restricted (neither is *), a day matches either, or with '+' both.
CREATE FUNCTION jobq._cron_month(spec text[], len integer, wd1 integer) RETURNS text
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_dom   text := left(spec[4], len);   -- by day of month
    v_dow   text;                         -- by day of week
    v_wd    integer;
    v_k     integer;
BEGIN
    -- L: the last day; LW: the last weekday (Monday to Friday).
    IF substr(spec[10], 1, 1) = '1' THEN
        v_k := CASE WHEN substr(spec[10], 2, 1) = '0' THEN len
                    ELSE len - CASE (wd1 + len - 1) % 7 WHEN 6 THEN 1 WHEN 0 THEN 2 ELSE 0 END END;
        v_dom := overlay(v_dom PLACING '1' FROM v_k FOR 1);
    END IF;
    -- nW: day n if a weekday, else the Friday before or the Monday after, within the month.
    FOR v_k IN 1..CASE WHEN strpos(left(spec[9], len), '1') > 0 THEN len ELSE 0 END LOOP
        CONTINUE WHEN substr(spec[9], v_k, 1) = '0';
        v_wd := (wd1 + v_k - 1) % 7;
        v_dom := overlay(v_dom PLACING '1' FROM CASE
                     WHEN v_wd = 6 THEN CASE WHEN v_k > 1 THEN v_k - 1 ELSE v_k + 2 END
                     WHEN v_wd = 0 THEN CASE WHEN v_k < len THEN v_k + 1 ELSE v_k - 2 END
                     ELSE v_k END FOR 1);
    END LOOP;
    -- The weekdays, from the weekday of the 1st on.
    v_dow := left(repeat(substr(spec[6] || spec[6], wd1 + 1, 7), 5), len);
    -- n#k: the k-th weekday n; nL: the last.
    FOR v_wd IN 0..CASE WHEN strpos(spec[7] || spec[8], '1') > 0 THEN 6 ELSE -1 END LOOP
        FOR v_k IN 1..5 LOOP
            CONTINUE WHEN substr(spec[7], v_wd * 5 + v_k, 1) = '0'
                       OR 1 + (v_wd - wd1 + 7) % 7 + 7 * (v_k - 1) > len;
            v_dow := overlay(v_dow PLACING '1' FROM 1 + (v_wd - wd1 + 7) % 7 + 7 * (v_k - 1) FOR 1);
        END LOOP;
        CONTINUE WHEN substr(spec[8], v_wd + 1, 1) = '0';
        v_dow := overlay(v_dow PLACING '1' FROM len - ((wd1 + len - 1) % 7 - v_wd + 7) % 7 FOR 1);
    END LOOP;
    RETURN CASE
        WHEN substr(spec[10], 4, 1) = '1' THEN v_dom     -- day of week *
        WHEN substr(spec[10], 3, 1) = '1' THEN v_dow     -- day of month *
        WHEN substr(spec[10], 5, 1) = '1' THEN (v_dom::varbit & v_dow::varbit)::text
        ELSE (v_dom::varbit | v_dow::varbit)::text END;
END $$;

-- The matching days of month `m` of year `y` (jobq._cron_month's string).
CREATE FUNCTION jobq._cron_days(spec text[], y integer, m integer) RETURNS text
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE SET search_path = pg_catalog, jobq, pg_temp AS $$
BEGIN
    RETURN jobq._cron_month(spec,
        CASE WHEN m = 2 THEN CASE WHEN (y % 4 = 0 AND y % 100 <> 0) OR y % 400 = 0 THEN 29 ELSE 28 END
             WHEN m IN (4, 6, 9, 11) THEN 30 ELSE 31 END,
        extract(dow FROM make_date(y, m, 1))::integer);
END $$;

-- Whether `spec` matches any day at all: some month it names, of some length and first
-- weekday (every combination comes back within 400 years), has a matching day. False for
-- '0 0 30 2 *', which croner searches for until it gives up.
CREATE FUNCTION jobq._cron_feasible(spec text[]) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE SET search_path = pg_catalog, jobq, pg_temp AS $$
BEGIN
    RETURN EXISTS (
        SELECT 1
          FROM (SELECT DISTINCT l.len
                  FROM (VALUES (1, 31), (2, 28), (2, 29), (3, 31), (4, 30), (5, 31), (6, 30), (7, 31),
                               (8, 31), (9, 30), (10, 31), (11, 30), (12, 31)) l(month, len)
                 WHERE substr(spec[5], l.month, 1) = '1') l,
               generate_series(0, 6) wd1
         WHERE strpos(jobq._cron_month(spec, l.len, wd1), '1') > 0);
END $$;

-- The first wall-clock time at or after `wall` (forward) or at or before it (backward) that
-- `spec` matches, or NULL when there is none croner would find: it searches up to year 5000
-- forward (a tick on 5000-01-01 only when the search enters that day from its start) and down
-- to year 1 backward (0001-12-31 only from its end). Jumps by month, day, then hour and minute
-- within the day, never by second.
CREATE FUNCTION jobq._cron_wall(spec text[], wall timestamp, forward boolean) RETURNS timestamp
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_secs    text := spec[1];
    v_mins    text := spec[2];
    v_hours   text := spec[3];
    v_months  text := spec[5];
    v_y       integer;
    v_m       integer;
    v_d       integer;
    v_tod     integer;   -- the second of the day
    v_h       integer;
    v_mi      integer;
    v_s       integer;
    v_t       integer;
    v_k       integer;
    v_days    text;      -- jobq._cron_days of (v_days_y, v_days_m)
    v_days_y  integer;
    v_days_m  integer;
    v_looked  integer := 0;   -- months looked at
BEGIN
    IF strpos(v_secs, '1') = 0 OR strpos(v_mins, '1') = 0 OR strpos(v_hours, '1') = 0
       OR strpos(v_months, '1') = 0 THEN
        RETURN NULL;
    END IF;
    IF forward AND wall < timestamp '0001-01-01' THEN
        wall := timestamp '0001-01-01';
    ELSIF NOT forward AND wall > timestamp '5000-12-31 23:59:59' THEN
        wall := timestamp '5000-12-31 23:59:59';
    END IF;
    v_y := extract(year FROM wall)::integer;
    v_m := extract(month FROM wall)::integer;
    v_d := extract(day FROM wall)::integer;
    v_tod := extract(epoch FROM wall::time)::integer;
    LOOP
        -- croner's limits
        IF forward AND (v_y > 5000 OR (v_y = 5000 AND (v_m > 1 OR v_d > 1 OR wall > timestamp '5000-01-01'))) THEN
            RETURN NULL;
        ELSIF NOT forward AND (v_y < 1 OR (v_y = 1 AND (v_m < 12 OR v_d < 31 OR wall < timestamp '0001-12-31 23:59:59'))) THEN
            RETURN NULL;
        END IF;
        -- A month the expression does not name: on to the next (previous) one it names.
        IF substr(v_months, v_m, 1) <> '1' THEN
            IF forward THEN
                v_k := strpos(substr(v_months, v_m + 1), '1');
                IF v_k > 0 THEN
                    v_m := v_m + v_k;
                ELSE
                    v_y := v_y + 1;
                    v_m := strpos(v_months, '1');
                END IF;
                v_d := 1;
                v_tod := 0;
            ELSE
                v_k := strpos(reverse(substr(v_months, 1, v_m - 1)), '1');
                IF v_k > 0 THEN
                    v_m := v_m - v_k;
                ELSE
                    v_y := v_y - 1;
                    v_m := 13 - strpos(reverse(v_months), '1');
                END IF;
                v_d := 31;
                v_tod := 86399;
            END IF;
            CONTINUE;
        END IF;
        -- The matching days of this month; past two years of months with none, whether there
        -- can be any.
        IF v_days_y IS DISTINCT FROM v_y OR v_days_m IS DISTINCT FROM v_m THEN
            v_days := jobq._cron_days(spec, v_y, v_m);
            v_days_y := v_y;
            v_days_m := v_m;
            v_looked := v_looked + 1;
            IF v_looked = 24 AND NOT jobq._cron_feasible(spec) THEN
                RETURN NULL;
            END IF;
        END IF;
        -- The first (last) matching day from v_d on (back); none: the next (previous) month.
        IF forward THEN
            v_k := strpos(substr(v_days, v_d), '1');
            IF v_k = 0 THEN
                IF v_m = 12 THEN v_y := v_y + 1; v_m := 1; ELSE v_m := v_m + 1; END IF;
                v_d := 1;
                v_tod := 0;
                CONTINUE;
            ELSIF v_k > 1 THEN
                v_d := v_d + v_k - 1;
                v_tod := 0;
            END IF;
        ELSE
            v_d := least(v_d, length(v_days));
            v_k := strpos(reverse(substr(v_days, 1, v_d)), '1');
            IF v_k = 0 THEN
                IF v_m = 1 THEN v_y := v_y - 1; v_m := 12; ELSE v_m := v_m - 1; END IF;
                v_d := 31;
                v_tod := 86399;
                CONTINUE;
            ELSIF v_k > 1 THEN
                v_d := v_d - v_k + 1;
                v_tod := 86399;
            END IF;
        END IF;
        -- The first (last) matching time of that day from v_tod on (back): the same hour and
        -- minute, else a later (earlier) minute of the hour, else a later (earlier) hour.
        v_h := v_tod / 3600;
        v_mi := v_tod / 60 % 60;
        v_s := v_tod % 60;
        v_t := NULL;
        IF forward THEN
            IF substr(v_hours, v_h + 1, 1) = '1' THEN
                IF substr(v_mins, v_mi + 1, 1) = '1' THEN
                    v_k := strpos(substr(v_secs, v_s + 1), '1');
                    IF v_k > 0 THEN v_t := v_tod + v_k - 1; END IF;
                END IF;
                IF v_t IS NULL THEN
                    v_k := strpos(substr(v_mins, v_mi + 2), '1');
                    IF v_k > 0 THEN v_t := v_h * 3600 + (v_mi + v_k) * 60 + strpos(v_secs, '1') - 1; END IF;
                END IF;
            END IF;
            IF v_t IS NULL THEN
                v_k := strpos(substr(v_hours, v_h + 2), '1');
                IF v_k > 0 THEN
                    v_t := (v_h + v_k) * 3600 + (strpos(v_mins, '1') - 1) * 60 + strpos(v_secs, '1') - 1;
                END IF;
            END IF;
            IF v_t IS NULL THEN   -- none left this day
                v_d := v_d + 1;
                v_tod := 0;
                CONTINUE;
            END IF;
        ELSE
            IF substr(v_hours, v_h + 1, 1) = '1' THEN
                IF substr(v_mins, v_mi + 1, 1) = '1' THEN
                    v_k := strpos(reverse(substr(v_secs, 1, v_s + 1)), '1');
                    IF v_k > 0 THEN v_t := v_tod - v_k + 1; END IF;
                END IF;
                IF v_t IS NULL THEN
                    v_k := strpos(reverse(substr(v_mins, 1, v_mi)), '1');
                    IF v_k > 0 THEN v_t := v_h * 3600 + (v_mi - v_k) * 60 + 60 - strpos(reverse(v_secs), '1'); END IF;
                END IF;
            END IF;
            IF v_t IS NULL THEN
                v_k := strpos(reverse(substr(v_hours, 1, v_h)), '1');
                IF v_k > 0 THEN
                    v_t := (v_h - v_k) * 3600 + (60 - strpos(reverse(v_mins), '1')) * 60 + 60 - strpos(reverse(v_secs), '1');
                END IF;
            END IF;
            IF v_t IS NULL THEN   -- none left this day
                v_d := v_d - 1;
                v_tod := 86399;
                CONTINUE;
            END IF;
        END IF;
        RETURN make_timestamp(v_y, v_m, v_d, 0, 0, 0) + make_interval(secs => v_t);
    END LOOP;
END $$;

-- The UTC offset of zone `zone` at instant `t`, in seconds.
CREATE FUNCTION jobq._cron_offset(zone text, t timestamptz) RETURNS integer
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE SET search_path = pg_catalog, jobq, pg_temp AS $$
BEGIN
    RETURN extract(epoch FROM (t AT TIME ZONE zone) - (t AT TIME ZONE 'UTC'))::integer;
END $$;

-- The first instant in (lo, hi] whose offset in `zone` is not lo's: the zone's change of clock
-- between two whole-second instants (tzdata changes clocks on whole seconds), by bisection.
CREATE FUNCTION jobq._cron_transition(zone text, lo timestamptz, hi timestamptz) RETURNS timestamptz
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_offset  integer := jobq._cron_offset(zone, lo);
    v_lo      bigint := extract(epoch FROM lo)::bigint;
    v_hi      bigint := extract(epoch FROM hi)::bigint;
    v_mid     bigint;
BEGIN
    WHILE v_hi - v_lo > 1 LOOP
        v_mid := (v_lo + v_hi) / 2;
        IF jobq._cron_offset(zone, to_timestamp(v_mid)) = v_offset THEN
            v_lo := v_mid;
        ELSE
            v_hi := v_mid;
        END IF;
    END LOOP;
    RETURN to_timestamp(v_hi);
END $$;

-- The instants of wall-clock time `wall` (whole seconds) in `zone`: kind 1, one (first); kind
-- 2, a time the fall-back repeats: two (first, second); kind 0, a time the spring-forward
-- skips: none, and first is the first instant after the gap. The offsets in force a day
-- either side are the candidates (no zone changes its clock twice in a day).
CREATE FUNCTION jobq._cron_resolve(zone text, wall timestamp,
    OUT kind integer, OUT first timestamptz, OUT second timestamptz)
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_utc      timestamptz := wall AT TIME ZONE 'UTC';
    v_guess    timestamptz := wall AT TIME ZONE zone;
    v_offsets  integer[];
    v_found    timestamptz[];
BEGIN
    v_offsets := ARRAY[jobq._cron_offset(zone, v_guess - interval '1 day'), jobq._cron_offset(zone, v_guess),
                       jobq._cron_offset(zone, v_guess + interval '1 day')];
    IF v_offsets[1] = v_offsets[2] AND v_offsets[2] = v_offsets[3] THEN
        kind := 1;
        first := v_guess;
        RETURN;
    END IF;
    -- The candidates that hold: wall - offset has that offset.
    v_found := ARRAY(SELECT DISTINCT v_utc - make_interval(secs => o) AS i FROM unnest(v_offsets) o
                      WHERE jobq._cron_offset(zone, v_utc - make_interval(secs => o)) = o ORDER BY i);
    kind := cardinality(v_found);
    IF kind = 0 THEN
        first := jobq._cron_transition(zone, v_utc - make_interval(secs => (SELECT max(o) FROM unnest(v_offsets) o)),
                                             v_utc - make_interval(secs => (SELECT min(o) FROM unnest(v_offsets) o)));
    ELSE
        first := v_found[1];
        second := v_found[2];
    END IF;
END $$;

-- The first tick of `spec` in `zone` after `at` (forward), or the latest at or before it, or
-- NULL when croner finds none. Walks the matching wall-clock times from `at`'s own and turns
-- each into its tick (the rules at the top of this file); in the second pass of a repeated
-- range every wall-clock time of the range had its tick in the first pass, so the walk starts
-- at the range's end.
CREATE FUNCTION jobq._cron_tick(spec text[], zone text, at timestamptz, forward boolean) RETURNS timestamptz
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_at    timestamptz := to_timestamp(floor(extract(epoch FROM at)));   -- the whole second
    v_wall  timestamp := v_at AT TIME ZONE zone;
    v_after timestamp;   -- the wall-clock time a gap ends at
    r       record;
BEGIN
    r := jobq._cron_resolve(zone, v_wall);
    IF r.kind = 2 AND v_at = r.second THEN
        v_wall := ((jobq._cron_transition(zone, r.first, r.second) - interval '1 second') AT TIME ZONE zone)
                  + interval '1 second';
        IF NOT forward THEN
            v_wall := v_wall - interval '1 second';
        END IF;
    ELSIF forward THEN
        v_wall := v_wall + interval '1 second';
    END IF;
    LOOP
        v_wall := jobq._cron_wall(spec, v_wall, forward);
        IF v_wall IS NULL THEN
            RETURN NULL;
        END IF;
        r := jobq._cron_resolve(zone, v_wall);
        IF r.kind > 0 THEN
            RETURN r.first;   -- the time, or the first of a repeated one
        END IF;
        -- In a gap. A schedule of fixed times ticks as the gap ends, if that day matches
        -- (croner looks for the gap's end up to two hours on).
        v_after := r.first AT TIME ZONE zone;
        IF substr(spec[10], 6, 1) = '1' THEN
            IF v_after - v_wall > interval '2 hours' THEN
                RETURN NULL;
            END IF;
            IF extract(year FROM v_after) BETWEEN 1 AND 5000
               AND substr(spec[5], extract(month FROM v_after)::integer, 1) = '1'
               AND substr(jobq._cron_days(spec, extract(year FROM v_after)::integer, extract(month FROM v_after)::integer),
                          extract(day FROM v_after)::integer, 1) = '1' THEN
                RETURN r.first;
            END IF;
        END IF;
        -- No tick in the gap: on past it.
        v_wall := CASE WHEN forward THEN v_after ELSE (r.first - interval '1 second') AT TIME ZONE zone END;
    END LOOP;
END $$;

-- The first tick of `cron` in `time_zone` strictly after `after`. Raises 22023 for an
-- invalid expression or zone, or one with no tick after `after` (jobq_schedule's validation,
-- with `after` = now).
CREATE FUNCTION jobq._cron_next(cron text, time_zone text, after timestamptz) RETURNS timestamptz
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_spec  text[] := jobq._cron_parse(cron);
    v_zone  text := jobq._cron_zone(time_zone);
    v_tick  timestamptz;
BEGIN
    IF v_zone IS NULL THEN
        RAISE EXCEPTION 'jobq: unknown time zone "%" (use an IANA name such as Europe/Paris or UTC)', time_zone
            USING ERRCODE = '22023';
    ELSIF NOT isfinite(after) THEN
        RAISE EXCEPTION 'jobq: after must be a finite time' USING ERRCODE = '22023';
    END IF;
    v_tick := jobq._cron_tick(v_spec, v_zone, after, true);
    IF v_tick IS NULL THEN
        RAISE EXCEPTION 'jobq: cron expression "%" never comes due after % (CronScheduler time search limit exceeded.)', cron, after
            USING ERRCODE = '22023';
    END IF;
    RETURN v_tick;
END $$;

-- The latest tick of `cron` in `time_zone` at or before `upto`.
CREATE FUNCTION jobq._cron_latest(cron text, time_zone text, upto timestamptz) RETURNS timestamptz
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_spec  text[] := jobq._cron_parse(cron);
    v_zone  text := jobq._cron_zone(time_zone);
    v_tick  timestamptz;
BEGIN
    IF v_zone IS NULL THEN
        RAISE EXCEPTION 'jobq: unknown time zone "%" (use an IANA name such as Europe/Paris or UTC)', time_zone
            USING ERRCODE = '22023';
    ELSIF NOT isfinite(upto) THEN
        RAISE EXCEPTION 'jobq: upto must be a finite time' USING ERRCODE = '22023';
    END IF;
    v_tick := jobq._cron_tick(v_spec, v_zone, upto, false);
    IF v_tick IS NULL THEN
        RAISE EXCEPTION 'jobq: no tick of "%" before %: CronScheduler time search limit exceeded.', cron, upto
            USING ERRCODE = '22023';
    END IF;
    RETURN v_tick;
END $$;

-- ---- src/sql/twins/version.sql ----
-- Twin of src/lib.rs's `_edition`: which jobq this is. The generator writes the release.
CREATE FUNCTION jobq._edition() RETURNS TABLE (version text, edition text)
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, jobq, pg_temp AS $$
BEGIN
    version := '0.4.0'; edition := 'sql';
    RETURN NEXT;
END $$;

-- ---- src/sql/twins/waits.sql ----
-- Twins of src/waits.rs: jobq_checkout(..., wait) without shared memory.
--
-- What makes a job available rings a bell at its commit: a deferred constraint trigger
-- (src/sql/twins/edition.sql, jobq._ring) on the tables whose changes free a job (a row made
-- ready, a slot freed, a pause lifted, a rate limit changed, a worker told to stop) takes the
-- next value of the sequence jobq.rings, once per transaction, as it commits. The waiting calls
-- learn that it moved from one of them, the leader, which reads it every 10 ms (one page, no
-- lock) while the others sleep on an advisory lock it holds, and lets go of the lock to wake
-- them all when it moved (jobq._doze). So 64 idle waiting calls cost the server 100 wake-ups a
-- second, as one does (bench/results/wait-sql.md).
-- A ring comes just before its commit becomes visible (the WAL flush lies between), so the
-- look it causes may miss it: a call that saw a ring looks once more 10 ms later.
-- A ring is for every waiting call of the database; before a whole look (a checkout), a call
-- asks one index probe whether it could find anything: a due waiting job of its queues, one that
-- comes due before the call's alarm (the look then sets the alarm at it), or its worker told
-- to stop. When a job is there, the first call to look takes it and the others,
-- whose probes come after its commit, sleep on.
-- A waiting call holds an advisory lock named after its worker for the rest of its transaction:
-- jobq._waiting_workers() finds it, and the reap pass refreshes that worker's heartbeat (a
-- worker counts as alive while it waits), as the extension's does.
-- Unlike the extension's, a waiting call keeps its statement's snapshot: PL/pgSQL cannot let
-- go of it (docs/sql-edition.md).
CREATE SEQUENCE jobq.rings AS bigint CYCLE;

-- The sequence's last ring, as text ('0' before the first). A plain expression
-- (pg_sequence_last_value, not a query on the sequence), which a PL/pgSQL caller evaluates
-- without the executor; no pinned search_path (everything in it is qualified), so that it is
-- inlined there.
CREATE FUNCTION jobq._rung() RETURNS text
LANGUAGE sql VOLATILE AS $$ SELECT coalesce(pg_catalog.pg_sequence_last_value('jobq.rings'::pg_catalog.regclass), 0)::pg_catalog.text $$;

-- The advisory lock of a waiting worker: class 'jobq' (as jobq._take_slot's), then the worker.
CREATE FUNCTION jobq._waiter_key(worker uuid) RETURNS integer
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE SET search_path = pg_catalog, jobq, pg_temp AS $$
BEGIN
    RETURN hashtext('waiting ' || worker::text);
END $$;

CREATE FUNCTION jobq._wait_begin(worker uuid, queues text[]) RETURNS boolean
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, jobq, pg_temp AS $$
BEGIN
    PERFORM pg_advisory_xact_lock_shared(1785684593, jobq._waiter_key(worker));
    PERFORM set_config('jobq.rung', jobq._rung(), true);
    PERFORM set_config('jobq.relook', '', true);
    PERFORM set_config('jobq.waiter', worker::text, true);
    PERFORM set_config('jobq.wait_queues', coalesce(queues::text, ''), true);
    RETURN true;
END $$;

-- Whether a look could find anything: a due waiting job of the call's queues, or its worker
-- told to stop; or one that comes due before `alarm`, the end of the wait as the last look set
-- it (a job failed with a retry delay, or scheduled): the look sets the alarm at it, as a
-- commit moves the extension's.
CREATE FUNCTION jobq._worth_a_look(alarm timestamptz) RETURNS boolean
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_queues text[] := nullif(current_setting('jobq.wait_queues', true), '')::text[];
BEGIN
    RETURN EXISTS (SELECT 1 FROM jobq.ready r
                    WHERE r.run_at < greatest(alarm, clock_timestamp() + interval '1 microsecond')
                      AND (v_queues IS NULL
                           OR (r.queue_hash = ANY (ARRAY(SELECT hashtext(q) FROM unnest(v_queues) q))
                               AND r.queue = ANY (v_queues))))
        OR EXISTS (SELECT 1 FROM jobq.workers w
                    WHERE w.id = current_setting('jobq.waiter')::uuid AND w.stopping_at IS NOT NULL);
END $$;

-- Returns when the sequence jobq.rings moved from `seen`, or at `until`, and costs the server one
-- wake-up every 10 ms for all the waiting calls of the database together. The first call to
-- take the advisory lock (class 'jobq', 0) leads: it reads the sequence every 10 ms, holding the
-- lock. Every other call waits for the lock, shared, and so sleeps until the leader lets go of
-- it: when the sequence moved, at the leader's own end, or when its session ends or fails
-- (and it wakes just before deadlock_timeout, to wait anew: so the server runs no deadlock
-- check for it and, with log_lock_waits on, logs nothing). The lock is taken in a block that
-- ends by an exception (JQ000), which rolls the block's subtransaction back: that lets go of the
-- lock (an advisory lock of the transaction otherwise lasts until it ends) and of the
-- lock_timeout set inside it, so nothing outlives the call. The leader waits for no lock while
-- it holds this one, so no deadlock can run through it. A call that got the lock shared at once
-- (no leader: another call let go of it a moment ago) sleeps 5 ms and tries to lead again.
CREATE FUNCTION jobq._doze(seen text, until timestamptz) RETURNS void
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_left   double precision;
    v_asked  timestamptz;
    v_void   text;
BEGIN
    LOOP
        v_left := extract(epoch FROM until - clock_timestamp());
        EXIT WHEN v_left <= 0;
        BEGIN
            IF pg_try_advisory_xact_lock(1785684593, 0) THEN
                -- Simple expressions, not queries (PERFORM, SELECT): the poll costs no executor.
                WHILE jobq._rung() = seen
                      AND clock_timestamp() < until LOOP
                    v_void := pg_sleep(least(0.01, greatest(0, extract(epoch FROM until - clock_timestamp()))))::text;
                END LOOP;
                RAISE SQLSTATE 'JQ000';
            END IF;
            -- Woken at the latest just before deadlock_timeout, when the server would run its
            -- deadlock check for this wait and, with log_lock_waits on, log it.
            PERFORM set_config('lock_timeout', ceil(least(v_left * 1000,
                greatest(10, 0.9 * extract(epoch FROM current_setting('deadlock_timeout')::interval) * 1000)))::bigint::text, true);
            v_asked := clock_timestamp();
            PERFORM pg_advisory_xact_lock_shared(1785684593, 0);
            RAISE SQLSTATE 'JQ000';
        EXCEPTION WHEN SQLSTATE 'JQ000' OR lock_not_available THEN
            NULL;
        END;
        -- Led, or woken by the leader: the caller reads the sequence.
        EXIT WHEN v_asked IS NULL OR clock_timestamp() - v_asked > interval '1 ms';
        v_void := pg_sleep(0.005)::text;
        v_asked := NULL;
    END LOOP;
END $$;

-- Waits until a ring since the last look that a probe finds worth a look,
-- `due`, `opens`, `until`, or five seconds (the extension's net is one second; here each look of
-- 64 idle waiters a second would cost more than all their polls: bench/results/wait-sql.md); `keys`,
-- `rate` and `opening` are the extension's finer wake-ups, which a ring covers. A ring whose
-- probe finds nothing is probed again 10 ms later, in case its commit was not visible yet.
CREATE FUNCTION jobq._wait(until timestamptz, due timestamptz, keys text[] DEFAULT NULL, rate text DEFAULT NULL,
                           opens timestamptz DEFAULT NULL, opening integer DEFAULT 1)
RETURNS void
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_end     timestamptz := least(until, due, opens, clock_timestamp() + interval '5 seconds');
    v_seen    text := current_setting('jobq.rung', true);
    v_recheck boolean := current_setting('jobq.relook', true) = 'yes';
    v_now     text;
BEGIN
    LOOP
        IF v_recheck THEN
            PERFORM pg_sleep(0.01);
            v_recheck := false;
            IF jobq._worth_a_look(v_end) THEN
                PERFORM set_config('jobq.relook', '', true);
                RETURN;
            END IF;
        END IF;
        v_now := jobq._rung();
        IF v_now IS DISTINCT FROM v_seen THEN
            v_seen := v_now;
            PERFORM set_config('jobq.rung', v_now, true);
            -- Looked at now, and once more 10 ms later whatever this look finds.
            PERFORM set_config('jobq.relook', 'yes', true);
            IF jobq._worth_a_look(v_end) THEN
                RETURN;
            END IF;
            v_recheck := true;
            CONTINUE;
        END IF;
        PERFORM set_config('jobq.relook', '', true);
        EXIT WHEN clock_timestamp() >= v_end;
        PERFORM jobq._doze(v_seen, v_end);
    END LOOP;
END $$;

CREATE FUNCTION jobq._wait_end(took_nothing boolean) RETURNS void
LANGUAGE plpgsql STRICT VOLATILE SET search_path = pg_catalog, jobq, pg_temp AS $$ BEGIN END $$;

-- The extension rings at commit what these note; here the triggers of edition.sql ring.
CREATE FUNCTION jobq._wake(queue text, run_at timestamptz, jobs bigint) RETURNS boolean
LANGUAGE sql VOLATILE PARALLEL SAFE AS $$ SELECT true $$;

CREATE FUNCTION jobq._freed(key text) RETURNS boolean
LANGUAGE sql VOLATILE PARALLEL SAFE AS $$ SELECT true $$;

CREATE FUNCTION jobq._stop_checkouts(worker uuid) RETURNS boolean
LANGUAGE plpgsql STRICT VOLATILE SET search_path = pg_catalog, jobq, pg_temp AS $$ BEGIN RETURN true; END $$;

-- The workers whose checkouts wait now, in this database (their advisory locks).
CREATE FUNCTION jobq._waiting_workers() RETURNS uuid[]
LANGUAGE sql STRICT VOLATILE SET search_path = pg_catalog, jobq, pg_temp AS $$
    SELECT coalesce(array_agg(w.id), '{}')
      FROM jobq.workers w
     WHERE EXISTS (SELECT 1 FROM pg_locks l
                    WHERE l.locktype = 'advisory' AND l.database = (SELECT d.oid FROM pg_database d WHERE d.datname = current_database())
                      AND l.classid = 1785684593::oid AND l.objid = jobq._waiter_key(w.id)::oid
                      AND l.objsubid = 2 AND l.granted)
$$;

-- ---- src/sql/twins/wakes.sql ----
-- Twin of src/wakes.rs: the NOTIFY that wakes listening workers. As in the extension,
-- jobq.notify = immediate sends it from the transaction that makes a job ready (PostgreSQL
-- sends one per queue however often a transaction asks); by default it is deferred, because
-- PostgreSQL serialises the commits of transactions that notify: that halved the enqueue rate
-- at 16 clients (docs/performance.md, "The SQL edition"). The extension's background worker sends
-- the deferred ones right after the commit; here the transaction notes its queue (once) in an
-- unlogged table, and the next pass sends them (jobq._note_pass, src/sql/twins/health.sql).
CREATE UNLOGGED TABLE jobq.pending_notifies (queue text NOT NULL);

-- On every enqueue's path: it leaves the search_path to its callers, which pin it.
CREATE FUNCTION jobq._notify(queue text) RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE AS $$
DECLARE
    v_noted text := coalesce(current_setting('jobq.notified', true), '');
BEGIN
    IF current_setting('jobq.notify', true) = 'immediate' THEN
        PERFORM pg_catalog.pg_notify('jobq', queue);
    ELSIF strpos(v_noted, E'\n' || queue || E'\n') = 0 THEN
        INSERT INTO jobq.pending_notifies VALUES (queue);
        PERFORM set_config('jobq.notified', coalesce(nullif(v_noted, ''), E'\n') || queue || E'\n', true);
    END IF;
END $$;

-- ---- src/sql/workers.sql ----
-- Workers: registration, heartbeat, graceful shutdown, and the liveness rule every other
-- function uses.

-- The liveness rule is jobq.worker_alive(heartbeat_at, backend_pid, backend_start), in Rust
-- (src/liveness.rs): a fresh heartbeat and, for a worker bound to a session, that session.

-- Raises 42501 when `worker` exists and belongs to a role the caller may not act for
-- (src/privileges.rs), alive or not: a worker's id alone grants nothing.
CREATE FUNCTION jobq._refuse_foreign_worker(worker uuid) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_owner regrole;
BEGIN
    SELECT w.owner INTO v_owner FROM jobq.workers w WHERE w.id = worker;
    IF FOUND AND NOT jobq._may_act_for(v_owner) THEN
        RAISE EXCEPTION 'jobq: permission denied for worker %', worker
            USING ERRCODE = '42501',
                  DETAIL = format('The worker belongs to role %s.', v_owner),
                  HINT = 'Only the role that registered a worker, and members of jobq_admin, may act for it.';
    END IF;
END $$;

-- The refusal of a call naming `worker` that found no live worker the caller may act for:
-- 42501 for another role's worker, JQ001 (unknown or dead) otherwise.
CREATE FUNCTION jobq._refuse_worker(worker uuid) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, pg_temp AS $$
BEGIN
    PERFORM jobq._refuse_foreign_worker(worker);
    PERFORM jobq._unknown_worker(worker);
END $$;

-- Checks that `worker` is registered, alive and the caller's to act for (42501 or JQ001
-- otherwise, jobq._refuse_worker) and holds a KEY SHARE lock on its row until the caller's
-- transaction ends, so a concurrent reap pass cannot remove the worker while the caller is
-- giving it locks.
CREATE FUNCTION jobq._live_worker(worker uuid) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, pg_temp AS $$
BEGIN
    IF worker IS NULL THEN
        RAISE EXCEPTION 'jobq: worker must not be NULL' USING ERRCODE = '22004';
    END IF;
    PERFORM 1 FROM jobq.workers w
      WHERE w.id = worker AND jobq.worker_alive(w.heartbeat_at, w.backend_pid, w.backend_start)
        AND jobq._may_act_for(w.owner)
      FOR KEY SHARE;
    IF NOT FOUND THEN
        PERFORM jobq._refuse_worker(worker);
    END IF;
END $$;

-- True when `worker` is gone or dead, judged on its newest committed row: the FOR SHARE
-- lock waits out a heartbeat in flight and makes a later heartbeat wait for the caller, so
-- a worker is never declared dead while its own heartbeat is told it lives.
CREATE FUNCTION jobq._worker_dead(worker uuid) RETURNS boolean
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_alive boolean;
BEGIN
    SELECT jobq.worker_alive(w.heartbeat_at, w.backend_pid, w.backend_start) INTO v_alive
      FROM jobq.workers w WHERE w.id = worker FOR SHARE;
    RETURN NOT coalesce(v_alive, false);
END $$;

-- Registers worker `worker` (an id the caller chose): the body of jobq_register_worker, and
-- what the proxy extension (jobq_proxy, proxy/) calls on every node so that one worker has one
-- id everywhere (the contract, Scale-out). An id that exists already is refused by the primary key
-- (23505), whoever owns it: choosing an id grants nothing.
CREATE FUNCTION jobq._register_worker(worker uuid, name text, metadata jsonb, bind_to_session boolean)
RETURNS uuid LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_now  timestamptz := clock_timestamp();
BEGIN
    IF worker IS NULL THEN
        RAISE EXCEPTION 'jobq: worker must not be NULL' USING ERRCODE = '22004';
    ELSIF bind_to_session IS NULL THEN
        RAISE EXCEPTION 'jobq: bind_to_session must not be NULL' USING ERRCODE = '22004';
    END IF;
    INSERT INTO jobq.workers (id, owner, name, metadata, registered_at, heartbeat_at, backend_pid, backend_start)
    SELECT worker, jobq._caller(), _register_worker.name, coalesce(metadata, '{}'), v_now, v_now, a.pid, a.backend_start
      FROM (SELECT NULL::integer AS pid, NULL::timestamptz AS backend_start WHERE NOT bind_to_session
            UNION ALL
            SELECT s.pid, s.backend_start FROM pg_stat_get_activity(pg_backend_pid()) s WHERE bind_to_session) a;
    RETURN worker;
END $$;

CREATE FUNCTION jobq_register_worker(name text DEFAULT NULL, metadata jsonb DEFAULT '{}', bind_to_session boolean DEFAULT false)
RETURNS uuid LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, jobq, pg_temp AS $$
    SELECT jobq._register_worker(gen_random_uuid(), name, metadata, bind_to_session);
$$;

-- With `holding`, the worker's executing jobs that it does not list go back to the queue as
-- interrupted (jobq._return_jobs, as the reaper does): a checkout whose reply never reached
-- the worker, or a job whose thread died, does not stay executing while the worker lives on.
CREATE FUNCTION jobq_heartbeat(worker uuid, holding bigint[] DEFAULT NULL) RETURNS bigint[]
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, jobq, pg_temp AS $$
BEGIN
    IF worker IS NULL THEN
        RAISE EXCEPTION 'jobq: worker must not be NULL' USING ERRCODE = '22004';
    ELSIF array_position(holding, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'jobq: holding must not contain NULL' USING ERRCODE = '22004';
    END IF;
    -- A compaction of the hot tables in progress is waited for, and none starts before this
    -- transaction ends (src/compact.rs).
    PERFORM jobq._hold_hot_tables();
    -- One row write, however many jobs the worker holds.
    UPDATE jobq.workers w SET heartbeat_at = clock_timestamp()
     WHERE w.id = worker AND jobq.worker_alive(w.heartbeat_at, w.backend_pid, w.backend_start)
       AND jobq._may_act_for(w.owner);
    IF NOT FOUND THEN
        PERFORM jobq._refuse_worker(worker);
    END IF;
    IF holding IS NOT NULL THEN
        PERFORM jobq._return_jobs(worker, true, ARRAY(
            SELECT j.id FROM jobq.live_jobs j
             WHERE j.worker_id = worker AND j.state = 'executing' AND j.id <> ALL (holding)));
    END IF;
    -- The SQL edition's workers run the passes as they beat (src/bgworker.rs); nothing here.
    PERFORM jobq._pass_if_due();
    RETURN ARRAY(SELECT j.id FROM jobq.live_jobs j
                  WHERE j.worker_id = worker AND j.state = 'executing'
                    AND j.cancel_requested_at IS NOT NULL
                  ORDER BY j.id);
END $$;

-- Leaving 'executing' or 'ready' for `new_state`: frees the job's execution slots and
-- releases or keeps its unique key as its strategy says. A job that waits again with an
-- until_executing key takes the key back if it is free; if another job took the key in the
-- meantime, it waits without it (it is not dropped: no job is lost). Returns the number of
-- execution slots it freed.
CREATE FUNCTION jobq._release_keys(job bigint, queue text, new_state text, unique_key text,
                                   unique_strategy text, concurrency_key text, concurrency_slot integer)
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    v_freed integer := 0;  -- execution slots freed: a concurrency slot, a while_executing key's
    v_noted boolean;
BEGIN
    -- A freed slot may let a waiting job of any queue start: each is noted for the waiting
    -- checkouts its key held back (src/waits.rs), rung at commit. (Assignments: see
    -- jobq._complete.)
    IF concurrency_slot IS NOT NULL THEN
        DELETE FROM jobq.slots s
         WHERE s.ns = 'c' AND s.key = concurrency_key AND s.slot = concurrency_slot AND s.job_id = job;
        IF FOUND THEN
            v_freed := 1;
            v_noted := jobq._freed('c' || concurrency_key);
        END IF;
    END IF;
    IF unique_key IS NULL THEN
        RETURN v_freed;
    ELSIF unique_strategy = 'while_executing' THEN
        DELETE FROM jobq.slots s
         WHERE s.ns = 'u' AND s.key = unique_key AND s.slot = 1 AND s.job_id = job;
        IF FOUND THEN
            v_freed := v_freed + 1;
            v_noted := jobq._freed('u' || unique_key);
        END IF;
    ELSIF new_state IN ('completed', 'dead', 'cancelled') THEN
        DELETE FROM jobq.locks l WHERE l.key = unique_key AND l.job_id = job;
    ELSIF new_state = 'ready' AND unique_strategy = 'until_executing' THEN
        PERFORM jobq._take_key(unique_key, job);
    END IF;
    RETURN v_freed;
END $$;

-- Returns jobs `ids` of `worker` to the queue, those of them still executing under it. Each
-- caller picks the ids and how they are locked (the reaper takes them SKIP LOCKED, so it
-- never waits for a row another transaction holds). interrupted => true is the reaper's way
-- (the attempt counts, interrupted_at is set, attempts exhausted make the job dead); false
-- is a graceful unregister (the attempt is given back). A job whose cancellation was
-- requested becomes cancelled either way.
CREATE FUNCTION jobq._return_jobs(worker uuid, interrupted boolean, ids bigint[],
                                  OUT requeued integer, OUT dead integer)
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
    r     record;
BEGIN
    requeued := 0;
    dead := 0;
    FOR r IN
        UPDATE jobq.live_jobs j SET
            state = CASE WHEN j.cancel_requested_at IS NOT NULL THEN 'cancelled'
                         WHEN interrupted AND j.attempt >= j.max_attempts THEN 'dead'
                         ELSE 'ready' END,
            attempt = CASE WHEN interrupted OR j.cancel_requested_at IS NOT NULL THEN j.attempt
                           ELSE j.attempt - 1 END,
            interrupted_at = CASE WHEN interrupted THEN v_now ELSE j.interrupted_at END,
            errors = CASE WHEN interrupted
                          THEN jobq._add_error(j.errors, jsonb_build_object('attempt', j.attempt, 'at', v_now, 'interrupted', true))
                          ELSE j.errors END,
            finished_at = CASE WHEN j.cancel_requested_at IS NOT NULL
                                 OR (interrupted AND j.attempt >= j.max_attempts) THEN v_now END
         WHERE j.id = ANY (ids) AND (CASE WHEN j.state = 'executing' THEN j.worker_id END) = worker  -- primary key only (finish.sql)
        RETURNING j.id, j.state, j.queue, j.unique_key, j.unique_strategy, j.concurrency_key,
                  j.concurrency_slot
    LOOP
        PERFORM jobq._release_keys(r.id, r.queue, r.state, r.unique_key, r.unique_strategy,
                                   r.concurrency_key, r.concurrency_slot);
        -- The dashboard's counters (src/counters.rs): an interrupted attempt failed (its run
        -- time, up to the reap, is not measured); a given-back one did not count.
        IF interrupted THEN
            PERFORM jobq._tally(r.queue, 'failed', NULL, v_now);
        END IF;
        IF r.state = 'dead' THEN
            PERFORM jobq._tally(r.queue, 'dead', NULL, v_now);
        END IF;
        IF r.state = 'ready' THEN
            PERFORM jobq._enter_ready(ARRAY[r.id]);
            requeued := requeued + 1;
            PERFORM jobq._notify(r.queue);
        ELSE
            PERFORM jobq._archive(ARRAY[r.id]);
            dead := dead + (r.state = 'dead')::integer;
        END IF;
    END LOOP;
END $$;

CREATE FUNCTION jobq_unregister_worker(worker uuid) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_requeued integer;
BEGIN
    IF worker IS NULL THEN
        RAISE EXCEPTION 'jobq: worker must not be NULL' USING ERRCODE = '22004';
    END IF;
    -- A compaction of the hot tables in progress is waited for, and none starts before this
    -- transaction ends (src/compact.rs).
    PERFORM jobq._hold_hot_tables();
    -- Same lock order as the reaper (worker row, then its jobs): one of the two wins.
    PERFORM 1 FROM jobq.workers w
      WHERE w.id = worker AND jobq.worker_alive(w.heartbeat_at, w.backend_pid, w.backend_start)
        AND jobq._may_act_for(w.owner)
      FOR UPDATE;
    IF NOT FOUND THEN
        PERFORM jobq._refuse_worker(worker);
    END IF;
    SELECT r.requeued INTO v_requeued FROM jobq._return_jobs(worker, false, ARRAY(
        SELECT j.id FROM jobq.live_jobs j WHERE j.worker_id = worker AND j.state = 'executing')) r;
    DELETE FROM jobq.locks l WHERE l.worker_id = worker;
    DELETE FROM jobq.workers w WHERE w.id = worker;
    RETURN v_requeued;
END $$;

-- The first step of a graceful shutdown (an addition to the contract): the worker's checkouts claim nothing
-- more. One waiting now (jobq_checkout with `wait`), in any session, returns at once with no
-- job once this transaction commits (rung through src/waits.rs; without the preload within its
-- 100 ms poll), and every later checkout of the worker (jobq_complete_and_checkout's included)
-- returns none, until the worker unregisters. A client stops its idle worker with it from a
-- second connection instead of cancelling the waiting statement, so a clean shutdown logs no
-- error. Its jobs, heartbeats, completions and failures are untouched. Worker rules as
-- jobq_heartbeat: 22004, 42501, JQ001.
CREATE FUNCTION jobq_stop_checkouts(worker uuid) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, jobq, pg_temp AS $$
BEGIN
    IF worker IS NULL THEN
        RAISE EXCEPTION 'jobq: worker must not be NULL' USING ERRCODE = '22004';
    END IF;
    UPDATE jobq.workers w SET stopping_at = coalesce(w.stopping_at, clock_timestamp())
     WHERE w.id = worker AND jobq.worker_alive(w.heartbeat_at, w.backend_pid, w.backend_start)
       AND jobq._may_act_for(w.owner);
    IF NOT FOUND THEN
        PERFORM jobq._refuse_worker(worker);
    END IF;
    PERFORM jobq._stop_checkouts(worker);
END $$;

-- ---- src/sql/enqueue.sql ----
-- Enqueue: jobq_enqueue (its common case in src/enqueue.rs, every case in jobq._enqueue),
-- jobq_enqueue_batch, and the unique-key helpers they use.

-- Takes `key` in jobq.locks for job `job`. A named lock whose ttl has passed or whose worker
-- is dead is removed first. False when a live holder (a job or a worker) has it. Like any
-- unique index, this waits for a concurrent, uncommitted taker of the same key and then
-- sees its outcome: it conflicts if that one committed and succeeds if it rolled back.
CREATE FUNCTION jobq._take_key(key text, job bigint) RETURNS boolean
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, pg_temp AS $$
BEGIN
    INSERT INTO jobq.locks (key, job_id, acquired_at) VALUES (key, job, clock_timestamp())
    ON CONFLICT DO NOTHING;
    IF FOUND THEN
        RETURN true;
    END IF;
    IF jobq._remove_stale_lock(key) THEN
        INSERT INTO jobq.locks (key, job_id, acquired_at) VALUES (key, job, clock_timestamp())
        ON CONFLICT DO NOTHING;
        RETURN FOUND;
    END IF;
    RETURN false;
END $$;

-- Deletes the named lock `key` if its ttl has passed or its worker is dead. Rows held by
-- jobs are never touched (nor locked). Liveness is first judged on the snapshot, and only a
-- holder that looks dead is re-judged under a row lock (jobq._worker_dead), so contention
-- for a live lock takes no row lock at all.
CREATE FUNCTION jobq._remove_stale_lock(key text) RETURNS boolean
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, pg_temp AS $$
BEGIN
    DELETE FROM jobq.locks l
     WHERE l.key = _remove_stale_lock.key AND l.worker_id IS NOT NULL
       AND (l.expires_at <= clock_timestamp()
            OR (NOT EXISTS (SELECT 1 FROM jobq.workers w
                             WHERE w.id = l.worker_id
                               AND jobq.worker_alive(w.heartbeat_at, w.backend_pid, w.backend_start))
                AND jobq._worker_dead(l.worker_id)));
    RETURN FOUND;
END $$;

-- jobq_enqueue, every case: the checks and their errors, a unique key's conflicts, then
-- jobq._insert_job. src/enqueue.rs does the common case itself and sends the rest here.
CREATE FUNCTION jobq._enqueue(
    queue             text,
    payload           jsonb,
    kind              text,
    priority          integer,
    run_at            timestamptz,
    max_attempts      integer,
    unique_key        text,
    unique_strategy   text,
    on_conflict       text,
    concurrency_key   text,
    concurrency_limit integer,
    rate_key          text,
    depends_on        bigint[],
    on_parent_failure text
) RETURNS bigint
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_now     timestamptz := clock_timestamp();
    v_run_at  timestamptz := coalesce(run_at, v_now);
    v_id      bigint;
    v_state   text := 'ready';
    v_holder  record;
    v_ready   tid;
    v_ready_queue text;
BEGIN
    IF queue IS NULL OR payload IS NULL OR priority IS NULL OR max_attempts IS NULL
       OR unique_strategy IS NULL OR on_conflict IS NULL OR concurrency_limit IS NULL OR on_parent_failure IS NULL THEN
        RAISE EXCEPTION 'jobq: queue, payload, priority, max_attempts, unique_strategy, on_conflict, concurrency_limit and on_parent_failure must not be NULL'
            USING ERRCODE = '22004';
    ELSIF queue = '' THEN
        RAISE EXCEPTION 'jobq: queue must not be empty' USING ERRCODE = '22023';
    ELSIF octet_length(queue) > 1000 OR octet_length(kind) > 1000 OR octet_length(unique_key) > 1000
          OR octet_length(concurrency_key) > 1000 OR octet_length(rate_key) > 1000 THEN
        RAISE EXCEPTION 'jobq: queue, kind, unique_key, concurrency_key and rate_key must be at most 1000 bytes'
            USING ERRCODE = '22023';
    ELSIF NOT isfinite(v_run_at) THEN
        RAISE EXCEPTION 'jobq: run_at must be a finite time, got %', run_at USING ERRCODE = '22023';
    ELSIF max_attempts < 1 THEN
        RAISE EXCEPTION 'jobq: max_attempts must be at least 1, got %', max_attempts USING ERRCODE = '22023';
    ELSIF unique_strategy NOT IN ('until_executed', 'until_executing', 'while_executing') THEN
        RAISE EXCEPTION 'jobq: unknown unique_strategy "%"', unique_strategy
            USING ERRCODE = '22023', HINT = 'Use until_executed, until_executing or while_executing.';
    ELSIF on_conflict NOT IN ('reject', 'discard', 'log', 'replace') THEN
        RAISE EXCEPTION 'jobq: unknown on_conflict "%"', on_conflict
            USING ERRCODE = '22023', HINT = 'Use reject, discard, log or replace.';
    ELSIF concurrency_limit < 1 OR concurrency_limit > 10000 THEN
        -- The bound: checkout looks for a free slot number among 1..limit.
        RAISE EXCEPTION 'jobq: concurrency_limit must be between 1 and 10000, got %', concurrency_limit
            USING ERRCODE = '22023';
    ELSIF unique_key = '' THEN
        RAISE EXCEPTION 'jobq: unique_key must not be empty (use NULL for none)' USING ERRCODE = '22023';
    ELSIF concurrency_key = '' THEN
        RAISE EXCEPTION 'jobq: concurrency_key must not be empty (use NULL for none)' USING ERRCODE = '22023';
    ELSIF rate_key = '' THEN
        RAISE EXCEPTION 'jobq: rate_key must not be empty (use NULL for none)' USING ERRCODE = '22023';
    ELSIF on_parent_failure NOT IN ('cancel', 'run') THEN
        RAISE EXCEPTION 'jobq: unknown on_parent_failure "%"', on_parent_failure
            USING ERRCODE = '22023', HINT = 'Use cancel or run.';
    END IF;

    v_id := nextval('jobq.jobs_id_seq');

    IF unique_key IS NOT NULL AND unique_strategy <> 'while_executing' THEN
        LOOP
            EXIT WHEN jobq._take_key(unique_key, v_id);
            SELECT l.job_id, l.worker_id INTO v_holder FROM jobq.locks l WHERE l.key = unique_key;
            CONTINUE WHEN NOT FOUND;  -- the holder let go in between: try again
            IF on_conflict = 'replace' AND v_holder.job_id IS NOT NULL THEN
                -- Debounce: the waiting job takes the new payload, priority and run_at
                -- (its ready row first: jobq._lock_ready), after any compaction of the hot
                -- tables in progress (src/compact.rs).
                PERFORM jobq._hold_hot_tables();
                v_ready := jobq._lock_ready(v_holder.job_id);
                IF v_ready IS NOT NULL THEN
                    UPDATE jobq.ready r SET priority = _enqueue.priority, run_at = v_run_at
                     WHERE r.ctid = v_ready
                    RETURNING r.queue INTO v_ready_queue;  -- the holder's queue, maybe not this one
                    PERFORM jobq._lower_floor('jobq.ready'::regclass, v_ready_queue, _enqueue.priority,
                                              v_run_at, v_holder.job_id);
                    UPDATE jobq.live_jobs j
                       SET payload = _enqueue.payload, priority = _enqueue.priority, run_at = v_run_at
                     WHERE j.id = v_holder.job_id;
                    PERFORM jobq._wake(v_ready_queue, v_run_at, 1);
                    IF v_run_at <= v_now THEN
                        PERFORM jobq._notify(v_ready_queue);  -- where the job waits
                    END IF;
                    RETURN v_holder.job_id;
                END IF;
                -- The holder is no longer waiting: it started (or finished) between the
                -- conflict and the update. If it let go of the key (an until_executing key
                -- is released when its job starts), take the key again; if it still holds
                -- it, this is a conflict with an executing job, which rejects.
                CONTINUE WHEN NOT EXISTS (SELECT 1 FROM jobq.locks l
                                           WHERE l.key = unique_key AND l.job_id = v_holder.job_id);
            ELSIF on_conflict = 'discard' THEN
                RETURN NULL;
            ELSIF on_conflict = 'log' THEN
                RAISE NOTICE 'jobq: unique key "%" is held by %; job not enqueued', unique_key,
                    coalesce('job ' || v_holder.job_id, 'the lock of worker ' || v_holder.worker_id);
                RETURN NULL;
            END IF;
            RAISE EXCEPTION 'jobq: unique key "%" is already taken', unique_key
                USING ERRCODE = '23505',
                      DETAIL = coalesce('existing job id: ' || v_holder.job_id,
                                        'held by the lock of worker ' || v_holder.worker_id);
        END LOOP;
    END IF;

    -- Its parents, each once in the order first named (duplicates are ignored), checked and
    -- locked, its edges written (src/sql/workflows.sql).
    IF depends_on IS NOT NULL THEN
        depends_on := ARRAY(SELECT d.p FROM unnest(_enqueue.depends_on) WITH ORDINALITY AS d(p, n)
                             GROUP BY d.p ORDER BY min(d.n));
        v_state := jobq._depend(v_id, depends_on, on_parent_failure);
    END IF;
    RETURN jobq._insert_job(v_id, queue, payload, kind, priority, v_run_at, max_attempts,
                            unique_key, unique_strategy, concurrency_key, concurrency_limit, rate_key,
                            depends_on, v_state);
END $$;

-- Writes job `id` (its unique key, if any, already taken): the job row, its ready row, the
-- counter, the wake-ups. What src/enqueue.rs does without a plan, and its fallback for tables
-- that are not the ones it knows.
CREATE FUNCTION jobq._insert_job(
    id                bigint,
    queue             text,
    payload           jsonb,
    kind              text,
    priority          integer,
    run_at            timestamptz,
    max_attempts      integer,
    unique_key        text,
    unique_strategy   text,
    concurrency_key   text,
    concurrency_limit integer,
    rate_key          text,
    depends_on        bigint[] DEFAULT NULL,
    state             text DEFAULT 'ready'     -- or 'blocked', or 'cancelled' (jobq._depend)
) RETURNS bigint
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_now     timestamptz := clock_timestamp();
BEGIN
    -- The hot tables in their one lock order: jobq.ready before jobq.live_jobs, as checkout and
    -- the compaction (src/sql/compact.sql) take them. Inserting the job row first would hold
    -- live_jobs while waiting for ready: a compaction holding ready and waiting for live_jobs
    -- then never gets it (measured: keyed enqueues kept every compaction off after the first).
    LOCK TABLE jobq.ready IN ROW EXCLUSIVE MODE;
    INSERT INTO jobq.live_jobs (id, queue, kind, payload, priority, run_at, enqueued_at, state, max_attempts,
                           unique_key, unique_strategy, concurrency_key, concurrency_limit, rate_key,
                           depends_on, finished_at)
    VALUES (id, queue, kind, payload, priority, run_at, v_now, _insert_job.state, max_attempts,
            unique_key, CASE WHEN unique_key IS NOT NULL THEN unique_strategy END,
            concurrency_key, CASE WHEN concurrency_key IS NOT NULL THEN concurrency_limit END, rate_key,
            _insert_job.depends_on, CASE WHEN _insert_job.state = 'cancelled' THEN v_now END);
    PERFORM jobq._tally(queue, 'enqueued', NULL, v_now);  -- the dashboard's counters (src/counters.rs)
    IF _insert_job.state = 'cancelled' THEN
        -- A parent already failed (on_parent_failure 'cancel'): finished at once, keys freed.
        PERFORM jobq._archive(ARRAY[id]);
        PERFORM jobq._release_keys(id, queue, 'cancelled', unique_key, unique_strategy, NULL, NULL);
        RETURN id;
    END IF;
    PERFORM jobq._enter_ready(ARRAY[id]);  -- nothing for a blocked job

    -- One notification per queue per transaction: PostgreSQL folds identical ones, and
    -- jobq._notify (deferred) notes a queue once.
    IF run_at <= v_now THEN
        PERFORM jobq._notify(queue);
    END IF;
    RETURN id;
END $$;

CREATE FUNCTION jobq_enqueue_batch(
    queue        text,
    payloads     jsonb[],
    kind         text        DEFAULT NULL,
    priority     integer     DEFAULT 0,
    run_at       timestamptz DEFAULT NULL,
    max_attempts integer     DEFAULT 25
) RETURNS SETOF bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_now     timestamptz := clock_timestamp();
    v_run_at  timestamptz := coalesce(run_at, v_now);
    v_ids     bigint[];
BEGIN
    IF queue IS NULL OR payloads IS NULL OR priority IS NULL OR max_attempts IS NULL THEN
        RAISE EXCEPTION 'jobq: queue, payloads, priority and max_attempts must not be NULL' USING ERRCODE = '22004';
    ELSIF array_position(payloads, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'jobq: payloads must not contain NULL (element %)', array_position(payloads, NULL)
            USING ERRCODE = '22004';
    ELSIF queue = '' THEN
        RAISE EXCEPTION 'jobq: queue must not be empty' USING ERRCODE = '22023';
    ELSIF octet_length(queue) > 1000 OR octet_length(kind) > 1000 THEN
        RAISE EXCEPTION 'jobq: queue and kind must be at most 1000 bytes' USING ERRCODE = '22023';
    ELSIF NOT isfinite(v_run_at) THEN
        RAISE EXCEPTION 'jobq: run_at must be a finite time, got %', run_at USING ERRCODE = '22023';
    ELSIF max_attempts < 1 THEN
        RAISE EXCEPTION 'jobq: max_attempts must be at least 1, got %', max_attempts USING ERRCODE = '22023';
    END IF;
    IF cardinality(payloads) = 0 THEN
        RETURN;
    END IF;
    -- jobq.ready before jobq.live_jobs (see jobq_enqueue).
    LOCK TABLE jobq.ready IN ROW EXCLUSIVE MODE;
    -- Ids come from the sequence in row order, so ordering by id is payload order.
    WITH ins AS (
        INSERT INTO jobq.live_jobs (queue, kind, payload, priority, run_at, enqueued_at, state, max_attempts)
        SELECT queue, kind, p.payload, priority, v_run_at, v_now, 'ready', max_attempts
          FROM unnest(payloads) WITH ORDINALITY AS p(payload, ord)
         ORDER BY p.ord
        RETURNING id
    )
    SELECT array_agg(ins.id ORDER BY ins.id) INTO v_ids FROM ins;
    PERFORM jobq._enter_ready(v_ids);
    PERFORM jobq._tally(queue, 'enqueued', NULL, v_now) FROM unnest(v_ids);
    RETURN QUERY SELECT u.id FROM unnest(v_ids) AS u(id);
    IF v_run_at <= v_now THEN
        PERFORM jobq._notify(queue);
    END IF;
END $$;

-- ---- src/sql/locks.sql ----
-- Named locks. They live in jobq.locks beside the unique keys of jobs: one namespace.

CREATE FUNCTION jobq_acquire_lock(key text, worker uuid, ttl interval DEFAULT '5 minutes')
RETURNS boolean LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_now      timestamptz := clock_timestamp();
    v_expires  timestamptz;
BEGIN
    IF key IS NULL OR ttl IS NULL THEN
        RAISE EXCEPTION 'jobq: key and ttl must not be NULL' USING ERRCODE = '22004';
    ELSIF key = '' THEN
        RAISE EXCEPTION 'jobq: lock key must not be empty' USING ERRCODE = '22023';
    ELSIF octet_length(key) > 1000 THEN
        RAISE EXCEPTION 'jobq: lock key must be at most 1000 bytes, got %', octet_length(key) USING ERRCODE = '22023';
    ELSIF ttl <= interval '0' OR ttl > interval '100000 years' THEN
        -- The bound keeps now() + ttl a timestamp (the largest is in the year 294276).
        RAISE EXCEPTION 'jobq: ttl must be positive and at most 100000 years, got %', ttl USING ERRCODE = '22023';
    END IF;
    PERFORM jobq._live_worker(worker);
    v_expires := v_now + ttl;

    -- Held by this worker already: extend it.
    UPDATE jobq.locks l SET expires_at = v_expires
     WHERE l.key = jobq_acquire_lock.key AND l.worker_id = worker;
    IF FOUND THEN
        RETURN true;
    END IF;
    -- Free: take it. Held by a stale named lock: remove that holder, then take it.
    INSERT INTO jobq.locks (key, worker_id, acquired_at, expires_at) VALUES (key, worker, v_now, v_expires)
    ON CONFLICT DO NOTHING;
    IF FOUND THEN
        RETURN true;
    END IF;
    IF jobq._remove_stale_lock(key) THEN
        INSERT INTO jobq.locks (key, worker_id, acquired_at, expires_at) VALUES (key, worker, v_now, v_expires)
        ON CONFLICT DO NOTHING;
        RETURN FOUND;
    END IF;
    RETURN false;
END $$;

CREATE FUNCTION jobq_release_lock(key text, worker uuid) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, jobq, pg_temp AS $$
BEGIN
    IF key IS NULL THEN
        RAISE EXCEPTION 'jobq: key must not be NULL' USING ERRCODE = '22004';
    END IF;
    PERFORM jobq._live_worker(worker);
    DELETE FROM jobq.locks l WHERE l.key = jobq_release_lock.key AND l.worker_id = worker;
    RETURN FOUND;
END $$;

CREATE FUNCTION jobq_lock_holder(key text) RETURNS uuid
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, jobq, pg_temp AS $$
    SELECT l.worker_id
      FROM jobq.locks l JOIN jobq.workers w ON w.id = l.worker_id
     WHERE l.key = $1 AND l.expires_at > clock_timestamp()
       AND jobq.worker_alive(w.heartbeat_at, w.backend_pid, w.backend_start)
$$;

-- ---- src/sql/rate_limits.sql ----
-- Rate limits: jobq_set_rate_limit, and jobq._take_rate, which checkout calls for a job with
-- a rate key (jobq._claim_keyed, src/sql/checkout.sql).
--
-- A limit of N starts per window `per` is N slots, each holding the time of the last start
-- that used it. A start takes a slot whose last start is more than `per` ago and writes its
-- own start time there, so any window of length `per` holds at most one start per slot: at
-- most N in all, exactly, whatever the interleaving (a sliding window, not a fixed one: no
-- burst of 2N across a window boundary). Taking a slot is an UPDATE of a row that is locked
-- with SKIP LOCKED and re-checked on its newest version, so two checkouts never take one
-- slot and a checkout never waits for another; a checkout that rolls back gives its start
-- back. The time written is the claim's own (the job's `started_at`).
--
-- A change of a key's limit rewrites its slots, and must see every start made (else a start
-- in flight would be forgotten and the window could take one more). Takers and changes of a
-- key meet on one transaction-level advisory lock of class 'jobq' (as jobq._take_slot's) on
-- hashtext('r:' || key): a taker that finds a slot free tries it shared and, when a change
-- holds it, passes the key over for this call without waiting; a change takes it
-- exclusively, waiting for the transactions that went to take a start to end, so it reads and
-- rewrites the slots while none is taking one. A change never holds a slot row while it
-- waits: locking the slots instead (FOR UPDATE, one after another) deadlocked with takers,
-- whose SKIP LOCKED still waits for a row that it reaches through an update committed during
-- its own attempt (PostgreSQL follows the update chain and waits on the newer version's
-- locker). One cycle is left to the caller: a transaction that took starts of a key (its
-- checkout) and then changes that key's limit waits for the others' starts while holding
-- its own, so it can deadlock (40P01) with another doing the same or, rarely, with a
-- checkout of the key; change limits in transactions of their own.

CREATE TABLE jobq.rate_limits (
    key         text PRIMARY KEY,
    max_starts  integer NOT NULL,
    per         interval NOT NULL,
    set_at      timestamptz NOT NULL
);
CREATE TABLE jobq.rate_slots (
    key         text NOT NULL,
    slot        integer NOT NULL,          -- 1..max_starts, then spares (jobq_set_rate_limit)
    last_start  timestamptz NOT NULL,      -- '-infinity': never used
    PRIMARY KEY (key, slot)
)
-- Updated at every start of a rate-limited job (and re-indexed: rate_slots_oldest): vacuumed
-- after a fixed number of dead rows, like jobq.slots.
WITH (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 5000,
      autovacuum_vacuum_cost_delay = 0);
-- A start looks for the key's least recently used slot: through this index it reads one entry,
-- not every slot of the key (a limit may have 10,000).
CREATE INDEX rate_slots_oldest ON jobq.rate_slots (key, last_start);

CREATE FUNCTION jobq_set_rate_limit(key text, max_starts integer, per interval) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_recent timestamptz[];
    v_noted  boolean;
BEGIN
    IF key IS NULL THEN
        RAISE EXCEPTION 'jobq: key must not be NULL' USING ERRCODE = '22004';
    ELSIF key = '' OR octet_length(key) > 1000 THEN
        RAISE EXCEPTION 'jobq: key must be 1 to 1000 bytes' USING ERRCODE = '22023';
    ELSIF max_starts IS NOT NULL THEN
        IF per IS NULL THEN
            RAISE EXCEPTION 'jobq: per must not be NULL' USING ERRCODE = '22004';
        ELSIF max_starts < 1 OR max_starts > 10000 THEN
            RAISE EXCEPTION 'jobq: max_starts must be between 1 and 10000, got %', max_starts USING ERRCODE = '22023';
        ELSIF per <= interval '0' OR NOT isfinite(per) THEN
            RAISE EXCEPTION 'jobq: per must be a finite interval greater than 0, got %', per USING ERRCODE = '22023';
        END IF;
    END IF;
    -- The key's lock (above): from here to the commit no start of the key is in progress.
    PERFORM pg_advisory_xact_lock(1785684593, hashtext('r:' || key));
    -- A limit removed or changed may let waiting jobs start now: every waiting checkout of
    -- this database looks again after the commit (src/waits.rs).
    v_noted := jobq._wake(NULL, '-infinity', 10000);
    IF max_starts IS NULL THEN
        -- No limit any more: the key's jobs start as plain ones.
        DELETE FROM jobq.rate_slots s WHERE s.key = jobq_set_rate_limit.key;
        DELETE FROM jobq.rate_limits l WHERE l.key = jobq_set_rate_limit.key;
        RETURN;
    END IF;
    INSERT INTO jobq.rate_limits AS l (key, max_starts, per, set_at)
    VALUES (key, max_starts, per, clock_timestamp())
    ON CONFLICT ON CONSTRAINT rate_limits_pkey
    DO UPDATE SET max_starts = EXCLUDED.max_starts, per = EXCLUDED.per, set_at = EXCLUDED.set_at;
    -- The slots anew, keeping every start already made, the most recent in the slots the
    -- limit uses (1..max_starts) and the older ones in spare slots above it, which a start
    -- never takes but a later raise of the limit finds again: so a limit lowered and raised
    -- again counts the starts made meanwhile, and no window ever holds more starts than the
    -- highest limit it saw. (Under READ COMMITTED this statement's snapshot, taken after the
    -- lock, sees every start made; under REPEATABLE READ a start committed since the
    -- transaction's snapshot makes the DELETE raise 40001.)
    v_recent := ARRAY(SELECT s.last_start FROM jobq.rate_slots s WHERE s.key = jobq_set_rate_limit.key
                       ORDER BY s.last_start DESC);
    DELETE FROM jobq.rate_slots s WHERE s.key = jobq_set_rate_limit.key;
    INSERT INTO jobq.rate_slots (key, slot, last_start)
    SELECT key, g.slot, coalesce(v_recent[g.slot], '-infinity')
      FROM generate_series(1, greatest(max_starts, cardinality(v_recent))) AS g(slot);
END $$;

-- Takes one start of rate key `key` at time `started` for a job being claimed: true when the
-- key has no limit or a slot was free (see above), false when its window is full.
CREATE FUNCTION jobq._take_rate(key text, started timestamptz) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    -- A full window, or a key without a limit, is answered without the key's lock: only a
    -- checkout that finds a slot free holds it, so a change waits for the checkouts that
    -- went to take a start, not for every one that found the window full.
    IF NOT EXISTS (SELECT 1 FROM jobq.rate_slots x JOIN jobq.rate_limits l ON l.key = x.key
                    WHERE x.key = _take_rate.key AND x.last_start < started - l.per
                      AND x.slot <= l.max_starts) THEN
        RETURN NOT EXISTS (SELECT 1 FROM jobq.rate_limits l WHERE l.key = _take_rate.key);
    END IF;
    -- The key's lock, shared with its other takers and tried without waiting: a change of
    -- the key's limit holds it (or, rarely, another key's of the same hash), and the key has
    -- no start for this call; that change's commit wakes the waiting checkouts (once its
    -- locks are released, src/xact.rs).
    IF NOT pg_try_advisory_xact_lock_shared(1785684593, hashtext('r:' || key)) THEN
        RETURN false;
    END IF;
    -- The window and the slots are read by one statement, so a limit changed meanwhile is
    -- seen whole or not at all (jobq_set_rate_limit rewrites the slots with the limit).
    UPDATE jobq.rate_slots s SET last_start = started
     WHERE s.ctid = (SELECT x.ctid FROM jobq.rate_slots x JOIN jobq.rate_limits l ON l.key = x.key
                      WHERE x.key = _take_rate.key AND x.last_start < started - l.per
                        AND x.slot <= l.max_starts
                      ORDER BY x.last_start
                      LIMIT 1
                        FOR UPDATE OF x SKIP LOCKED);
    RETURN FOUND OR NOT EXISTS (SELECT 1 FROM jobq.rate_limits l WHERE l.key = _take_rate.key);
END $$;

-- ---- src/sql/checkout.sql ----
-- Checkout: the hot path.
--
-- Its common case (READ COMMITTED, a usable worker, no wait) runs in Rust without a plan:
-- jobq_checkout is a C function (src/checkout.rs), which hands every other case to
-- jobq._checkout, the SQL that serves them all, described here. Both claim the same jobs with
-- the same rows, locks and keys (tests/checkout.rs).
--
-- jobq._checkout: one statement per batch picks the first due, unpaused rows of jobq.ready in claim order
-- through its index (no sort), locks them with FOR UPDATE SKIP LOCKED (never waiting for
-- another checkout) and, in the same statement, takes what the keyed ones need to start
-- (jobq._take_keys: a concurrency or while_executing slot, a start of their rate, giving up
-- an until_executing key) and claims every one that can start: a claim deletes the ready row
-- and marks the job row executing. A job is claimed only by the transaction that deleted its
-- ready row, and only while its row says 'ready'. When that statement claimed fewer than
-- asked, the general path looks further, one keyed job at a time (jobq._claim_keyed): a job
-- that cannot start has its key (for a concurrency key: its key up to its limit) skipped for
-- the rest of the call, and the next batch looks past it.
-- PL/pgSQL prepares each statement once per backend and, with the function's
-- plan_cache_mode, keeps its generic plan: no statement is planned again per call.
--
-- The helpers a keyed claim and its release call for each job (jobq._take_keys, _take_slot,
-- _claim_keyed, _take_rate, _release_keys) do not pin their search_path as every other function
-- does: a pinned setting is parsed, applied and undone at every call, which cost a keyed job
-- about 50,000 instructions (bench/instructions.sh, row jobq_ckey). They run only inside
-- jobq's own functions, which pin it, and no role but the extension's owner may call them
-- (src/sql/privileges.sql); tests/lifecycle.rs checks both.

-- Takes a slot of (ns, key) numbered 1..slot_limit for `job` and returns its number, the
-- highest one free (jobs with a lower limit for the same key find the low slots free as
-- long as possible); NULL when every slot up to the limit is held. A slot is held by its
-- row (jobq.slots), so taking one is an INSERT. It never waits: a slot row another
-- transaction is inserting is passed over thanks to a transaction-level advisory lock on
-- the slot, which every taker tries before inserting (only takers insert slot rows), and a
-- row committed since this statement began makes the INSERT do nothing (under REPEATABLE
-- READ it raises 40001, which jobq._checkout_in_snapshot treats as "taken").
-- The advisory lock is the two-integer form with class 'jobq' (0x6a6f6271), apart from the
-- one-bigint form applications usually use; a collision with an application's lock of the
-- same class and hash only makes this checkout pass the slot over.
CREATE FUNCTION jobq._take_slot(ns "char", key text, slot_limit integer, job bigint) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_slot integer;
BEGIN
    -- One statement: the highest slot that is free in this statement's snapshot and whose
    -- advisory lock no other taker holds (CASE: the lock is tried only on a free slot). A
    -- slot committed since the snapshot makes the INSERT do nothing: the job is then taken
    -- as blocked for this call, never started beyond its limit.
    INSERT INTO jobq.slots (ns, key, slot, job_id)
    SELECT _take_slot.ns, _take_slot.key, g.slot, job
      FROM generate_series(slot_limit, 1, -1) AS g(slot)
     WHERE CASE WHEN NOT EXISTS (SELECT 1 FROM jobq.slots s
                                  WHERE s.ns = _take_slot.ns AND s.key = _take_slot.key AND s.slot = g.slot)
                THEN pg_try_advisory_xact_lock(1785684593, hashtext(_take_slot.ns || g.slot || ':' || _take_slot.key))
                ELSE false END
     LIMIT 1
    ON CONFLICT DO NOTHING
    RETURNING slot INTO v_slot;
    RETURN v_slot;
END $$;

-- Takes what waiting job `job` needs to start at `started`, in this order: the slot of its
-- while_executing key, a slot of its concurrency key, a start of its rate (src/sql/rate_limits.sql;
-- last, because a start taken is not given back before the transaction ends); then gives up
-- its until_executing key and deletes its ready row (`ready`, which the caller holds locked).
-- Returns its concurrency slot (0: it has no concurrency key), and the caller must then mark
-- the job executing in the same transaction; or, when it cannot start now, having given back
-- what it took and changed nothing: -1 (its concurrency key is full), -2 (its while_executing
-- key is busy), -3 (its rate key has no start left).
-- The ready row is deleted here, by this statement's own snapshot, and not by the caller's
-- statement: when a replace updated the row after the caller's statement began, the caller's
-- lock (FOR UPDATE re-checks the newest version) holds a version that statement cannot see,
-- so a DELETE there would miss it, leaving keys taken for a job left waiting.
CREATE FUNCTION jobq._take_keys(job bigint, ready tid, started timestamptz) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    j          record;
    v_slot     integer := 0;
    v_blocked  integer;
BEGIN
    SELECT x.unique_key, x.unique_strategy, x.concurrency_key, x.concurrency_limit, x.rate_key INTO j
      FROM jobq.live_jobs x WHERE x.id = job;
    -- (Nested IFs: unique_strategy is NULL for most jobs, and NULL AND x evaluates x.)
    IF j.unique_strategy = 'while_executing' THEN
        IF jobq._take_slot('u', j.unique_key, 1, job) IS NULL THEN
            RETURN -2;
        END IF;
    END IF;
    IF j.concurrency_key IS NOT NULL THEN
        v_slot := jobq._take_slot('c', j.concurrency_key, j.concurrency_limit, job);
        IF v_slot IS NULL THEN
            v_blocked := -1;
        END IF;
    END IF;
    IF v_blocked IS NULL AND j.rate_key IS NOT NULL AND NOT jobq._take_rate(j.rate_key, started) THEN
        v_blocked := -3;
    END IF;
    IF v_blocked IS NOT NULL THEN
        -- Give back the slots taken above.
        DELETE FROM jobq.slots s
         WHERE s.job_id = job AND ((s.ns = 'u' AND s.key = j.unique_key) OR (s.ns = 'c' AND s.key = j.concurrency_key));
        RETURN v_blocked;
    END IF;
    IF j.unique_strategy = 'until_executing' THEN
        DELETE FROM jobq.locks l WHERE l.key = j.unique_key AND l.job_id = job;
    END IF;
    DELETE FROM jobq.ready r WHERE r.ctid = ready;
    IF NOT FOUND THEN
        -- Cannot happen: the caller holds the row locked. Undo everything rather than leave
        -- keys taken for a job that does not start.
        RAISE EXCEPTION 'jobq: the ready row of job % was not found at its claim', job USING ERRCODE = 'XX000';
    END IF;
    RETURN v_slot;
END $$;

-- Claims a job whose ready row (`ready`, its ctid) this checkout holds locked, taking what it
-- needs to start first and deleting that row (jobq._take_keys). NULL when claimed; otherwise 'c' (its concurrency
-- key is full), 'u' (its while_executing key is busy) or 'r' (its rate key has no start
-- left in the window), and nothing changed.
CREATE FUNCTION jobq._claim_keyed(job bigint, ready tid, worker uuid, started timestamptz) RETURNS "char"
LANGUAGE plpgsql AS $$
DECLARE
    v_slot  integer := jobq._take_keys(job, ready, started);
BEGIN
    IF v_slot < 0 THEN
        RETURN (ARRAY['c', 'u', 'r']::"char"[])[-v_slot];
    END IF;
    UPDATE jobq.live_jobs x
       SET state = 'executing', worker_id = _claim_keyed.worker, attempt = x.attempt + 1,
           started_at = started, concurrency_slot = nullif(v_slot, 0)
     WHERE x.id = job;
    RETURN NULL;
END $$;

-- Checkout inside a REPEATABLE READ or SERIALIZABLE client transaction. There, locking a
-- row that another transaction changed after our snapshot raises 40001 instead of being
-- skipped; a job another checkout claimed meanwhile (or a slot it took) is exactly such a
-- row. So candidates are locked one at a time, each in its own subtransaction, and one
-- that changed under us is skipped like a locked one: the caller sees no serialization
-- failure that skipping would have avoided. The guarantees are the same rows and locks as
-- in READ COMMITTED; only the cost per candidate is higher.
CREATE FUNCTION jobq._checkout_in_snapshot(worker uuid, queues text[], max_jobs integer,
                                           now timestamptz, paused boolean,
                                           fp integer, fr timestamptz, fi bigint)
RETURNS bigint[]
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_claimed  bigint[] := '{}';
    v_skip_c   text[] := '{}';
    v_skip_l   integer[] := '{}';
    v_skip_u   text[] := '{}';
    v_skip_r   text[] := '{}';
    v_blocked  "char";
    c          record;
BEGIN
    FOR c IN
        SELECT r.ctid AS rid, r.id, r.keyed, r.concurrency_key, r.concurrency_limit, r.while_key, r.rate_key
          FROM jobq.ready r
         WHERE (queues IS NULL OR r.queue = ANY (queues)) AND r.run_at <= now
           AND (r.priority, r.run_at, r.id) >= (fp, fr, fi)  -- the claim floor (fp, fr, fi)
           AND (NOT paused OR NOT EXISTS (
                   SELECT 1 FROM jobq.pauses p
                    WHERE (p.queue = r.queue AND (p.kind IS NULL OR p.kind = r.kind))
                       OR (p.queue IS NULL AND p.kind = r.kind)))
         ORDER BY r.priority, r.run_at, r.id
    LOOP
        EXIT WHEN cardinality(v_claimed) >= max_jobs;
        CONTINUE WHEN c.while_key = ANY (v_skip_u) OR c.rate_key = ANY (v_skip_r);
        CONTINUE WHEN c.concurrency_key IS NOT NULL AND EXISTS (
            SELECT 1 FROM unnest(v_skip_c, v_skip_l) AS s(key, lim)
             WHERE s.key = c.concurrency_key AND c.concurrency_limit <= s.lim);
        BEGIN
            PERFORM 1 FROM jobq.ready r WHERE r.ctid = c.rid FOR UPDATE SKIP LOCKED;
            CONTINUE WHEN NOT FOUND;
            IF NOT c.keyed THEN
                DELETE FROM jobq.ready r WHERE r.ctid = c.rid;
                UPDATE jobq.live_jobs x
                   SET state = 'executing', worker_id = _checkout_in_snapshot.worker,
                       attempt = x.attempt + 1, started_at = now
                 WHERE x.id = c.id;
                v_blocked := NULL;
            ELSE
                v_blocked := jobq._claim_keyed(c.id, c.rid, worker, now);
            END IF;
            IF v_blocked IS NULL THEN
                v_claimed := v_claimed || c.id;
            ELSIF v_blocked = 'c' THEN
                v_skip_c := v_skip_c || c.concurrency_key;
                v_skip_l := v_skip_l || c.concurrency_limit;
            ELSIF v_blocked = 'u' THEN
                v_skip_u := v_skip_u || c.while_key;
            ELSE
                v_skip_r := v_skip_r || c.rate_key;
            END IF;
        EXCEPTION WHEN serialization_failure THEN
            NULL;  -- changed since our snapshot: skip it, as if it were locked
        END;
    END LOOP;
    RETURN v_claimed;
END $$;

-- plan_cache_mode: PL/pgSQL keeps each statement's plan, but PostgreSQL re-plans a
-- parameterised statement on every call when it estimates the generic plan dearer than
-- custom ones, which it does for the candidate query; that cost ~170 us per checkout
-- (measured: docs/performance.md). The generic plan is the right one here: an ordered index scan.
-- jit = off: the generic plan's cost is estimated for a LIMIT it cannot know (10% of the
-- table), so on a large table it crosses jit_above_cost and every checkout compiled its
-- statements with LLVM: 1.7 s of JIT per call at 1.4M ready jobs (bench/soak.sh found it).
-- A checkout reads a handful of rows; JIT never pays here.
-- wait: see jobq._checkout_waiting below; a call without it pays one IS NOT NULL test.
CREATE FUNCTION jobq._checkout(worker uuid, queues text[], max_jobs integer, wait interval)
RETURNS SETOF jobq.job
LANGUAGE plpgsql
SET search_path = pg_catalog, jobq, pg_temp
SET plan_cache_mode = force_generic_plan
SET jit = off AS $$
DECLARE
    v_now      timestamptz := clock_timestamp();
    v_queue    text;                 -- set when exactly one queue is asked for
    v_paused   boolean;
    v_rc       boolean;              -- READ COMMITTED: the fast path may run
    v_live     boolean;              -- the worker is registered, alive and the caller's
    v_fp       integer;              -- the claim floor: no ready row of these queues has a
    v_fr       timestamptz;          -- claim key (priority, run_at, id) below it
    v_fi       bigint;
    v_claimed  bigint[] := '{}';
    v_skip_c   text[] := '{}';       -- concurrency keys found full during this call,
    v_skip_l   integer[] := '{}';    -- for jobs with this limit or a lower one
    v_skip_u   text[] := '{}';       -- while_executing keys found busy during this call
    v_skip_r   text[] := '{}';       -- rate keys found without a start left during this call
    v_fast     integer := 0;         -- claimed (and returned) by the fast path
    v_want     integer;
    v_seen     integer;
    v_blocked  "char";
    c          record;
    cur        refcursor;
BEGIN
    IF wait IS NOT NULL THEN
        RETURN QUERY SELECT * FROM jobq._checkout_waiting(worker, queues, max_jobs, wait);
        RETURN;
    END IF;
    IF max_jobs IS NULL THEN
        RAISE EXCEPTION 'jobq: max_jobs must not be NULL' USING ERRCODE = '22004';
    ELSIF max_jobs < 1 OR max_jobs > 10000 THEN
        RAISE EXCEPTION 'jobq: max_jobs must be between 1 and 10000, got %', max_jobs USING ERRCODE = '22023';
    END IF;
    IF worker IS NULL THEN
        RAISE EXCEPTION 'jobq: worker must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF cardinality(queues) = 1 THEN
        v_queue := queues[1];
    END IF;
    v_rc := current_setting('transaction_isolation') = 'read committed';
    -- The worker, judged by one lookup by primary key (src/liveness.rs), not by a part of the
    -- claim statement: that part cost every checkout ~39,000 instructions.
    v_live := jobq._usable_worker(worker);
    -- Where the walk starts: past the dead entries of earlier claims (src/floors.rs).
    SELECT f.priority, f.run_at, f.id INTO v_fp, v_fr, v_fi FROM jobq._floor('jobq.ready'::regclass, v_queue) f;

    -- Fast path, one statement: if the worker is alive and the caller's to act for, lock the
    -- first max_jobs unpaused candidates, take the keys of
    -- the keyed ones, claim every one that can start and return them. When that is fewer
    -- than max_jobs (a queue with fewer jobs, a key that cannot start, a dead worker), the
    -- general path below looks for the rest: it raises JQ001 for a dead worker and looks past
    -- the keys that cannot start. The candidates that could not start stay locked by us.
    -- No row lock on the worker (it would cost a WAL record per checkout): a reap pass that
    -- deletes this worker while we claim leaves our claims orphaned, and the next pass
    -- requeues them (jobq._reap, orphaned jobs).
    -- Plan shape: the claim goes through the primary key with id = ANY (ARRAY(...)); a join
    -- with `cand` gets a hash join over the whole table in the generic plan (which guesses
    -- LIMIT max_jobs at 10% of the table). The two statements differ only in the queue
    -- condition, so that each gets the index that serves its order.
    IF v_rc AND v_live THEN
        IF v_queue IS NOT NULL THEN
            RETURN QUERY
            WITH cand AS (
                SELECT r.ctid AS rid, r.id, r.keyed
                  FROM jobq.ready r
                 WHERE r.queue_hash = hashtext(v_queue) AND r.queue = v_queue AND r.run_at <= v_now
                   AND (r.priority, r.run_at, r.id) >= (v_fp, v_fr, v_fi)  -- the claim floor
                   AND (NOT EXISTS (SELECT 1 FROM jobq.pauses) OR NOT EXISTS (
                           SELECT 1 FROM jobq.pauses p
                            WHERE (p.queue = r.queue AND (p.kind IS NULL OR p.kind = r.kind))
                               OR (p.queue IS NULL AND p.kind = r.kind)))
                 ORDER BY r.priority, r.run_at, r.id
                 LIMIT max_jobs
                 FOR UPDATE SKIP LOCKED
            ), keys AS (
                -- A keyed candidate takes what it needs to start, in claim order, and its
                -- ready row goes (jobq._take_keys): its concurrency slot (0: none), or < 0
                -- when it cannot start now. NULL for the others.
                SELECT cand.rid, cand.id, CASE WHEN cand.keyed THEN jobq._take_keys(cand.id, cand.rid, v_now) END AS slot
                  FROM cand
            ), taken AS (
                DELETE FROM jobq.ready r
                 WHERE r.ctid = ANY (ARRAY(SELECT keys.rid FROM keys WHERE keys.slot IS NULL))
                RETURNING r.id
            ), claimed AS (
                UPDATE jobq.live_jobs j
                   SET state = 'executing', worker_id = _checkout.worker, attempt = j.attempt + 1,
                       started_at = v_now,
                       concurrency_slot = (SELECT nullif(keys.slot, 0) FROM keys WHERE keys.id = j.id)
                 WHERE j.id = ANY (ARRAY(SELECT taken.id FROM taken UNION ALL SELECT keys.id FROM keys WHERE keys.slot >= 0))
                   AND j.state = 'ready'
                RETURNING j.*, jobq._tally(j.queue, 'started', j.run_at, v_now) AS counted  -- src/counters.rs
            )
            SELECT j.id, j.queue, j.kind, j.payload, j.priority, j.attempt, j.max_attempts, j.run_at,
                   j.enqueued_at, j.unique_key, j.concurrency_key, j.interrupted_at, j.last_error,
                   j.unique_strategy, j.concurrency_limit, j.started_at, j.depends_on, j.checkpoints
              FROM claimed j
             ORDER BY j.priority, j.run_at, j.id;
        ELSE
            RETURN QUERY
            WITH cand AS (
                SELECT r.ctid AS rid, r.id, r.keyed
                  FROM jobq.ready r
                 WHERE (queues IS NULL OR r.queue = ANY (queues)) AND r.run_at <= v_now
                   AND (r.priority, r.run_at, r.id) >= (v_fp, v_fr, v_fi)  -- the claim floor
                   AND (NOT EXISTS (SELECT 1 FROM jobq.pauses) OR NOT EXISTS (
                           SELECT 1 FROM jobq.pauses p
                            WHERE (p.queue = r.queue AND (p.kind IS NULL OR p.kind = r.kind))
                               OR (p.queue IS NULL AND p.kind = r.kind)))
                 ORDER BY r.priority, r.run_at, r.id
                 LIMIT max_jobs
                 FOR UPDATE SKIP LOCKED
            ), keys AS (
                -- A keyed candidate takes what it needs to start, in claim order, and its
                -- ready row goes (jobq._take_keys): its concurrency slot (0: none), or < 0
                -- when it cannot start now. NULL for the others.
                SELECT cand.rid, cand.id, CASE WHEN cand.keyed THEN jobq._take_keys(cand.id, cand.rid, v_now) END AS slot
                  FROM cand
            ), taken AS (
                DELETE FROM jobq.ready r
                 WHERE r.ctid = ANY (ARRAY(SELECT keys.rid FROM keys WHERE keys.slot IS NULL))
                RETURNING r.id
            ), claimed AS (
                UPDATE jobq.live_jobs j
                   SET state = 'executing', worker_id = _checkout.worker, attempt = j.attempt + 1,
                       started_at = v_now,
                       concurrency_slot = (SELECT nullif(keys.slot, 0) FROM keys WHERE keys.id = j.id)
                 WHERE j.id = ANY (ARRAY(SELECT taken.id FROM taken UNION ALL SELECT keys.id FROM keys WHERE keys.slot >= 0))
                   AND j.state = 'ready'
                RETURNING j.*, jobq._tally(j.queue, 'started', j.run_at, v_now) AS counted  -- src/counters.rs
            )
            SELECT j.id, j.queue, j.kind, j.payload, j.priority, j.attempt, j.max_attempts, j.run_at,
                   j.enqueued_at, j.unique_key, j.concurrency_key, j.interrupted_at, j.last_error,
                   j.unique_strategy, j.concurrency_limit, j.started_at, j.depends_on, j.checkpoints
              FROM claimed j
             ORDER BY j.priority, j.run_at, j.id;
        END IF;
        GET DIAGNOSTICS v_fast = ROW_COUNT;
        IF v_fast >= max_jobs THEN
            RETURN;
        END IF;
    END IF;

    -- The general path. jobq._live_worker without its row lock (see the fast path); a worker
    -- that stops checking out (jobq_stop_checkouts, src/sql/workers.sql) claims nothing.
    IF NOT v_live THEN
        IF EXISTS (SELECT 1 FROM jobq.workers w
                    WHERE w.id = worker AND w.stopping_at IS NOT NULL AND jobq._may_act_for(w.owner)
                      AND jobq.worker_alive(w.heartbeat_at, w.backend_pid, w.backend_start)) THEN
            RETURN;
        END IF;
        PERFORM jobq._refuse_worker(worker);
    END IF;
    v_paused := EXISTS (SELECT 1 FROM jobq.pauses);
    IF NOT v_rc THEN
        v_claimed := jobq._checkout_in_snapshot(worker, queues, max_jobs, v_now, v_paused, v_fp, v_fr, v_fi);
    ELSE
        LOOP
            v_want := max_jobs - v_fast - cardinality(v_claimed);
            v_seen := 0;
            -- The two statements differ only in the queue condition, so that each gets the index
            -- that serves its order: one queue, or any/several queues.
            IF v_queue IS NOT NULL THEN
                OPEN cur FOR
                WITH cand AS (
                    SELECT r.ctid AS rid, r.id, r.priority, r.run_at, r.keyed, r.concurrency_key,
                           r.concurrency_limit, r.while_key, r.rate_key
                      FROM jobq.ready r
                     WHERE r.queue_hash = hashtext(v_queue) AND r.queue = v_queue AND r.run_at <= v_now
                       AND (r.priority, r.run_at, r.id) >= (v_fp, v_fr, v_fi)  -- the claim floor
                       AND (NOT v_paused OR NOT EXISTS (
                               SELECT 1 FROM jobq.pauses p
                                WHERE (p.queue = r.queue AND (p.kind IS NULL OR p.kind = r.kind))
                                   OR (p.queue IS NULL AND p.kind = r.kind)))
                       AND (r.concurrency_key IS NULL OR cardinality(v_skip_c) = 0 OR NOT EXISTS (
                               SELECT 1 FROM unnest(v_skip_c, v_skip_l) AS s(key, lim)
                                WHERE s.key = r.concurrency_key AND r.concurrency_limit <= s.lim))
                       AND (r.while_key IS NULL OR r.while_key <> ALL (v_skip_u))
                       AND (r.rate_key IS NULL OR r.rate_key <> ALL (v_skip_r))
                     ORDER BY r.priority, r.run_at, r.id
                     LIMIT v_want
                     FOR UPDATE SKIP LOCKED
                ), taken AS (
                    DELETE FROM jobq.ready r
                     WHERE r.ctid = ANY (ARRAY(SELECT cand.rid FROM cand WHERE NOT cand.keyed))
                    RETURNING r.id
                ), claimed AS (
                    UPDATE jobq.live_jobs j
                       SET state = 'executing', worker_id = _checkout.worker, attempt = j.attempt + 1,
                           started_at = v_now
                     WHERE j.id = ANY (ARRAY(SELECT taken.id FROM taken)) AND j.state = 'ready'
                    RETURNING j.id
                )
                SELECT cand.rid, cand.id, claimed.id IS NOT NULL AS claimed, cand.keyed,
                       cand.concurrency_key, cand.concurrency_limit, cand.while_key, cand.rate_key
                  FROM cand LEFT JOIN claimed ON claimed.id = cand.id
                 ORDER BY cand.priority, cand.run_at, cand.id;
            ELSE
                OPEN cur FOR
                WITH cand AS (
                    SELECT r.ctid AS rid, r.id, r.priority, r.run_at, r.keyed, r.concurrency_key,
                           r.concurrency_limit, r.while_key, r.rate_key
                      FROM jobq.ready r
                     WHERE (queues IS NULL OR r.queue = ANY (queues)) AND r.run_at <= v_now
                       AND (r.priority, r.run_at, r.id) >= (v_fp, v_fr, v_fi)  -- the claim floor
                       AND (NOT v_paused OR NOT EXISTS (
                               SELECT 1 FROM jobq.pauses p
                                WHERE (p.queue = r.queue AND (p.kind IS NULL OR p.kind = r.kind))
                                   OR (p.queue IS NULL AND p.kind = r.kind)))
                       AND (r.concurrency_key IS NULL OR cardinality(v_skip_c) = 0 OR NOT EXISTS (
                               SELECT 1 FROM unnest(v_skip_c, v_skip_l) AS s(key, lim)
                                WHERE s.key = r.concurrency_key AND r.concurrency_limit <= s.lim))
                       AND (r.while_key IS NULL OR r.while_key <> ALL (v_skip_u))
                       AND (r.rate_key IS NULL OR r.rate_key <> ALL (v_skip_r))
                     ORDER BY r.priority, r.run_at, r.id
                     LIMIT v_want
                     FOR UPDATE SKIP LOCKED
                ), taken AS (
                    DELETE FROM jobq.ready r
                     WHERE r.ctid = ANY (ARRAY(SELECT cand.rid FROM cand WHERE NOT cand.keyed))
                    RETURNING r.id
                ), claimed AS (
                    UPDATE jobq.live_jobs j
                       SET state = 'executing', worker_id = _checkout.worker, attempt = j.attempt + 1,
                           started_at = v_now
                     WHERE j.id = ANY (ARRAY(SELECT taken.id FROM taken)) AND j.state = 'ready'
                    RETURNING j.id
                )
                SELECT cand.rid, cand.id, claimed.id IS NOT NULL AS claimed, cand.keyed,
                       cand.concurrency_key, cand.concurrency_limit, cand.while_key, cand.rate_key
                  FROM cand LEFT JOIN claimed ON claimed.id = cand.id
                 ORDER BY cand.priority, cand.run_at, cand.id;
            END IF;

            v_blocked := NULL;
            LOOP
                FETCH cur INTO c;
                EXIT WHEN NOT FOUND;
                v_seen := v_seen + 1;
                IF c.claimed THEN
                    v_claimed := v_claimed || c.id;
                    CONTINUE;
                END IF;
                CONTINUE WHEN NOT c.keyed;  -- its job was not 'ready' (cannot happen): the ready row is gone
                v_blocked := jobq._claim_keyed(c.id, c.rid, worker, v_now);
                IF v_blocked IS NULL THEN
                    v_claimed := v_claimed || c.id;
                ELSIF v_blocked = 'c' THEN
                    -- No free slot up to this job's limit: jobs of this key with a limit no
                    -- higher are blocked too; a job with a higher limit may still find one.
                    v_skip_c := v_skip_c || c.concurrency_key;
                    v_skip_l := v_skip_l || c.concurrency_limit;
                ELSIF v_blocked = 'u' THEN
                    v_skip_u := v_skip_u || c.while_key;
                ELSE
                    v_skip_r := v_skip_r || c.rate_key;
                END IF;
            END LOOP;
            CLOSE cur;
            -- Stop when enough were claimed, or when the batch came back short (nothing more is
            -- available); otherwise look again past the keys that could not start.
            EXIT WHEN v_fast + cardinality(v_claimed) >= max_jobs OR v_seen < v_want;
        END LOOP;
    END IF;

    -- The claimed jobs, in the order they were claimed.
    PERFORM jobq._tally(j.queue, 'started', j.run_at, j.started_at)  -- src/counters.rs
       FROM jobq.live_jobs j WHERE j.id = ANY (v_claimed);
    RETURN QUERY
    SELECT j.id, j.queue, j.kind, j.payload, j.priority, j.attempt, j.max_attempts, j.run_at,
           j.enqueued_at, j.unique_key, j.concurrency_key, j.interrupted_at, j.last_error,
           j.unique_strategy, j.concurrency_limit, j.started_at, j.depends_on, j.checkpoints
      FROM unnest(v_claimed) WITH ORDINALITY AS k(id, ord)
      JOIN jobq.live_jobs j ON j.id = k.id
     ORDER BY k.ord;
END $$;

-- jobq_checkout(..., wait): checks out; when nothing is available, waits inside the server
-- (src/waits.rs) until a commit makes a job of these queues available (or frees a slot of a
-- key that holds one back), the earliest scheduled one comes due, the earliest rate window
-- that holds one back opens, or `wait` runs out, and checks out again. The waiter is
-- registered before its first look, so no commit between a look and the sleep goes unnoticed. Each look runs in a
-- subtransaction that is rolled back when it claimed nothing: whatever it locked (a keyed job
-- whose slot was taken meanwhile) is not held while the call sleeps. READ COMMITTED only: a
-- transaction snapshot would never see the jobs it waits for.
CREATE FUNCTION jobq._checkout_waiting(worker uuid, queues text[], max_jobs integer, wait interval)
RETURNS SETOF jobq.job
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_until  timestamptz;
    v_look   timestamptz;
    v_due    timestamptz;
    v_keys   text[];
    v_rates  text[];
    v_rate   text;
    v_opens  timestamptz;
    v_opening integer;
    v_hashes integer[] := ARRAY(SELECT hashtext(q) FROM unnest(queues) q);  -- ready_by_queue's keys
BEGIN
    IF wait <= interval '0' OR wait > interval '1 hour' THEN
        RAISE EXCEPTION 'jobq: wait must be more than 0 and at most 1 hour, got %', wait USING ERRCODE = '22023';
    END IF;
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'jobq: jobq_checkout with wait needs READ COMMITTED'
            USING ERRCODE = '0A000',
                  DETAIL = 'A transaction snapshot never sees the jobs committed after it was taken.';
    END IF;
    v_until := clock_timestamp() + wait;
    IF NOT jobq._wait_begin(worker, queues) THEN
        -- No waiter slot (no preload, or all taken): no reap pass keeps this worker alive
        -- while it waits, so the wait ends before its heartbeat could run out.
        v_until := least(v_until, clock_timestamp() + current_setting('jobq.heartbeat_timeout')::interval / 2);
    END IF;
    LOOP
        -- A worker that stops checking out (jobq_stop_checkouts, src/sql/workers.sql) waits no
        -- more: read before each look, so a call rung for it, or begun after it, returns at
        -- once (its looks would claim nothing).
        EXIT WHEN EXISTS (SELECT 1 FROM jobq.workers w
                           WHERE w.id = worker AND w.stopping_at IS NOT NULL AND jobq._may_act_for(w.owner));
        BEGIN
            v_look := clock_timestamp();
            RETURN QUERY SELECT * FROM public.jobq_checkout(worker, queues, max_jobs);
            IF FOUND THEN
                PERFORM jobq._wait_end(false);  -- no longer a waiter, whatever the transaction does next
                RETURN;
            END IF;
            -- What no commit for these queues announces, read anew at each look (a scan of
            -- these queues' waiting rows: none of them could start): the earliest scheduled job
            -- comes due (the waiter's alarm; a commit that schedules an earlier one moves it);
            -- a slot is freed, by a job of any queue, of a key that holds back a due job
            -- (`_freed`'s names: 'c' and a concurrency key, 'u' and a while_executing key); a
            -- rate window that holds one back opens.
            SELECT min(r.run_at) FILTER (WHERE r.run_at > v_look),
                   array_agg(DISTINCT 'c' || r.concurrency_key) FILTER (WHERE r.run_at <= v_look AND r.concurrency_key IS NOT NULL)
                   || array_agg(DISTINCT 'u' || r.while_key) FILTER (WHERE r.run_at <= v_look AND r.while_key IS NOT NULL),
                   array_agg(DISTINCT r.rate_key) FILTER (WHERE r.run_at <= v_look AND r.rate_key IS NOT NULL)
              INTO v_due, v_keys, v_rates
              FROM jobq.ready r
             WHERE (queues IS NULL OR (r.queue_hash = ANY (v_hashes) AND r.queue = ANY (queues)));
            -- The earliest of their full windows (its oldest start, through rate_slots_oldest,
            -- still in it) opens when that start leaves it, strictly after last_start + per
            -- (jobq._take_rate), with every start made at the same moment.
            SELECT l.key, o.oldest + l.per + interval '1 ms',
                   (SELECT count(*) FROM jobq.rate_slots s
                     WHERE s.key = l.key AND s.last_start = o.oldest AND s.slot <= l.max_starts)
              INTO v_rate, v_opens, v_opening
              FROM jobq.rate_limits l
             CROSS JOIN LATERAL (SELECT s.last_start AS oldest FROM jobq.rate_slots s
                                  WHERE s.key = l.key AND s.slot <= l.max_starts
                                  ORDER BY s.last_start LIMIT 1) o
             WHERE l.key = ANY (v_rates) AND o.oldest >= v_look - l.per
             ORDER BY 2
             LIMIT 1;
            -- Nothing claimed: let go of whatever the look locked, and of the locks on the
            -- tables it read (held, they would block DDL on them for the whole wait).
            RAISE SQLSTATE 'JQ000';
        EXCEPTION WHEN SQLSTATE 'JQ000' THEN
            NULL;
        END;
        EXIT WHEN clock_timestamp() >= v_until;
        PERFORM jobq._wait(v_until, v_due, v_keys, v_rate, v_opens, coalesce(v_opening, 1));
    END LOOP;
    PERFORM jobq._wait_end(true);  -- ran out: what its last look could not use goes on
END $$;

-- ---- src/sql/finish.sql ----


CREATE FUNCTION jobq._complete(job_id bigint, worker uuid, result jsonb) RETURNS boolean
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    j        jobq.live_jobs;
    v_noted  boolean;
    v_freed  integer;
BEGIN
    IF job_id IS NULL OR worker IS NULL THEN
        RAISE EXCEPTION 'jobq: job_id and worker must not be NULL' USING ERRCODE = '22004';
    END IF;
    -- A compaction of the hot tables in progress is waited for, and none starts before this
    -- transaction ends (src/compact.rs).
    PERFORM jobq._hold_hot_tables();
    -- The job leaves jobq.live_jobs; with jobq.retention = 0 nothing is kept, otherwise it
    -- goes to jobq.finished_jobs. One DELETE and one INSERT, not jobq._archive's UPDATE first:
    -- the hot path writes each row version once (docs/performance.md).
    DELETE FROM jobq.live_jobs x
     WHERE x.id = _complete.job_id AND (CASE WHEN x.state = 'executing' THEN x.worker_id END) = worker
       AND EXISTS (SELECT 1 FROM jobq.workers w WHERE w.id = worker AND jobq._may_act_for(w.owner))
    RETURNING x.* INTO j;
    IF NOT FOUND THEN
        PERFORM jobq._refuse_foreign_worker(worker);
        RETURN false;
    END IF;
    j.finished_at := clock_timestamp();
    -- Helpers are called in assignments, not with PERFORM: PL/pgSQL evaluates a lone call
    -- without starting an executor for it (docs/performance.md, "CPU per job").
    v_noted := jobq._tally(j.queue, 'completed', j.started_at, j.finished_at);  -- src/counters.rs
    IF jobq.retention_ms() > 0 THEN
        j.state := 'completed';
        j.result := _complete.result;
        INSERT INTO jobq.finished_jobs SELECT (j).*;
    END IF;
    IF j.unique_key IS NOT NULL OR j.concurrency_key IS NOT NULL THEN
        v_freed := jobq._release_keys(job_id, j.queue, 'completed', j.unique_key, j.unique_strategy,
                                      j.concurrency_key, j.concurrency_slot);
    END IF;
    -- The jobs that depend on or await this one (src/sql/workflows.sql).
    PERFORM jobq._settle(ARRAY[job_id], ARRAY['completed']);
    RETURN true;
END $$;

-- The default retry delay: 2^attempt seconds, +/-25% jitter (so failed jobs of one burst do
-- not come back together), capped at one hour.
CREATE FUNCTION jobq._backoff(attempt integer) RETURNS interval
LANGUAGE sql VOLATILE SET search_path = pg_catalog, jobq, pg_temp AS $$
    SELECT make_interval(secs => least(3600, power(2, least($1, 30)) * (0.75 + random() * 0.5)))
$$;

CREATE FUNCTION jobq_fail(job_id bigint, worker uuid, error jsonb DEFAULT NULL,
                          retry_in interval DEFAULT NULL, discard boolean DEFAULT false)
RETURNS text LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_now    timestamptz := clock_timestamp();
    j        record;
    v_state  text;
BEGIN
    IF job_id IS NULL OR worker IS NULL OR discard IS NULL THEN
        RAISE EXCEPTION 'jobq: job_id, worker and discard must not be NULL' USING ERRCODE = '22004';
    ELSIF retry_in < interval '0' OR retry_in > interval '100000 years' THEN
        -- The bound keeps now() + retry_in a timestamp (the largest is in the year 294276).
        RAISE EXCEPTION 'jobq: retry_in must be between 0 and 100000 years, got %', retry_in
            USING ERRCODE = '22023';
    END IF;
    -- A compaction of the hot tables in progress is waited for, and none starts before this
    -- transaction ends (src/compact.rs).
    PERFORM jobq._hold_hot_tables();
    SELECT x.queue, x.attempt, x.max_attempts, x.cancel_requested_at, x.unique_key, x.unique_strategy,
           x.concurrency_key, x.concurrency_slot, x.started_at INTO j
      FROM jobq.live_jobs x
     WHERE x.id = jobq_fail.job_id AND (CASE WHEN x.state = 'executing' THEN x.worker_id END) = worker
       AND EXISTS (SELECT 1 FROM jobq.workers w WHERE w.id = worker AND jobq._may_act_for(w.owner))
       FOR UPDATE OF x;
    IF NOT FOUND THEN
        PERFORM jobq._refuse_foreign_worker(worker);
        RETURN NULL;
    END IF;
    v_state := CASE WHEN j.cancel_requested_at IS NOT NULL THEN 'cancelled'
                    WHEN discard OR j.attempt >= j.max_attempts THEN 'dead'
                    ELSE 'ready' END;
    UPDATE jobq.live_jobs x
       SET state = v_state,
           last_error = error,
           errors = jobq._add_error(x.errors, jsonb_build_object('attempt', x.attempt, 'at', v_now, 'error', error)),
           run_at = CASE WHEN v_state = 'ready' THEN v_now + coalesce(retry_in, jobq._backoff(x.attempt))
                         ELSE x.run_at END,
           finished_at = CASE WHEN v_state <> 'ready' THEN v_now END
     WHERE x.id = jobq_fail.job_id;
    IF v_state = 'ready' THEN
        PERFORM jobq._enter_ready(ARRAY[job_id]);
    ELSE
        PERFORM jobq._archive(ARRAY[job_id]);
    END IF;
    -- The dashboard's counters (src/counters.rs): a failed attempt, and maybe a dead job.
    PERFORM jobq._tally(j.queue, 'failed', j.started_at, v_now);
    IF v_state = 'dead' THEN
        PERFORM jobq._tally(j.queue, 'dead', NULL, v_now);
    END IF;
    PERFORM jobq._release_keys(job_id, j.queue, v_state, j.unique_key, j.unique_strategy,
                               j.concurrency_key, j.concurrency_slot);
    IF v_state = 'ready' AND retry_in = interval '0' THEN
        PERFORM jobq._notify(j.queue);
    END IF;
    RETURN v_state;
END $$;

CREATE FUNCTION jobq_cancel(job_id bigint) RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    j          record;
    v_ready    tid;
    v_waiting  boolean;
    v_state    text;
BEGIN
    IF job_id IS NULL THEN
        RAISE EXCEPTION 'jobq: job_id must not be NULL' USING ERRCODE = '22004';
    END IF;
    -- A compaction of the hot tables in progress is waited for, and none starts before this
    -- transaction ends (src/compact.rs).
    PERFORM jobq._hold_hot_tables();
    LOOP
        -- A job not started yet: its jobq.blocked row (a blocked job, src/sql/workflows.sql) or
        -- its ready row (a waiting job, jobq._lock_ready) first, as whoever wakes or claims it
        -- takes them, then the job row.
        DELETE FROM jobq.blocked b WHERE b.job_id = jobq_cancel.job_id;
        v_waiting := FOUND;
        IF NOT v_waiting THEN
            v_ready := jobq._lock_ready(job_id);
            IF v_ready IS NOT NULL THEN
                DELETE FROM jobq.ready r WHERE r.ctid = v_ready;
                v_waiting := true;
            END IF;
        END IF;
        IF v_waiting THEN
            UPDATE jobq.live_jobs x SET state = 'cancelled', finished_at = clock_timestamp()
             WHERE x.id = jobq_cancel.job_id
            RETURNING x.queue, x.unique_key, x.unique_strategy, x.concurrency_key INTO j;
            PERFORM jobq._archive(ARRAY[job_id]);
            PERFORM jobq._release_keys(job_id, j.queue, 'cancelled', j.unique_key, j.unique_strategy,
                                       j.concurrency_key, NULL);
            RETURN 'cancelled';
        END IF;
        BEGIN
            SELECT x.state INTO j FROM jobq.live_jobs x WHERE x.id = jobq_cancel.job_id FOR UPDATE;
            IF NOT FOUND THEN
                -- Finished, or no such job. One snapshot over both tables (jobq.jobs) sees a
                -- job that jobq_retry moved back meanwhile in jobq.live_jobs: look again then.
                SELECT x.state INTO v_state FROM jobq.jobs x WHERE x.id = jobq_cancel.job_id;
                CONTINUE WHEN v_state IN ('ready', 'executing', 'blocked');
                RETURN v_state;
            ELSIF j.state IN ('ready', 'blocked') THEN
                -- It became ready again since we looked (a retry, a requeue): give the job
                -- row back (this block's subtransaction ends) and take the ready row first.
                RAISE EXCEPTION USING ERRCODE = 'JQ900';
            END IF;
            -- Executing: the worker sees the request in jobq_heartbeat; the reaper cancels
            -- it if the worker dies.
            UPDATE jobq.live_jobs x SET cancel_requested_at = coalesce(x.cancel_requested_at, clock_timestamp())
             WHERE x.id = jobq_cancel.job_id;
            RETURN j.state;
        EXCEPTION WHEN SQLSTATE 'JQ900' THEN
            NULL;
        END;
    END LOOP;
END $$;

CREATE FUNCTION jobq_retry(job_id bigint) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    j record;
BEGIN
    IF job_id IS NULL THEN
        RAISE EXCEPTION 'jobq: job_id must not be NULL' USING ERRCODE = '22004';
    END IF;
    SELECT x.queue, x.unique_key, x.unique_strategy INTO j
      FROM jobq.finished_jobs x
     WHERE x.id = jobq_retry.job_id AND x.state IN ('dead', 'cancelled')
       FOR UPDATE;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    IF j.unique_key IS NOT NULL AND j.unique_strategy <> 'while_executing'
       AND NOT jobq._take_key(j.unique_key, job_id) THEN
        RETURN false;
    END IF;
    -- Back to jobq.live_jobs, waiting again; jobq.ready locked first (see jobq_enqueue).
    LOCK TABLE jobq.ready IN ROW EXCLUSIVE MODE;
    WITH moved AS (
        DELETE FROM jobq.finished_jobs x WHERE x.id = jobq_retry.job_id RETURNING x.*
    )
    INSERT INTO jobq.live_jobs SELECT * FROM moved;
    UPDATE jobq.live_jobs x
       SET state = 'ready', attempt = 0, run_at = clock_timestamp(), finished_at = NULL,
           cancel_requested_at = NULL, interrupted_at = NULL
     WHERE x.id = jobq_retry.job_id;
    PERFORM jobq._enter_ready(ARRAY[job_id]);
    PERFORM jobq._notify(j.queue);
    -- The children this job's failure cancelled wait for it again (src/sql/workflows.sql).
    PERFORM jobq._reblock(job_id);
    RETURN true;
END $$;

-- Batch calls: many jobs of one worker in one call, so one round trip and one commit. Each job
-- goes through jobq_complete / jobq_fail, so fencing, keys and ownership are exactly theirs,
-- in ascending id order (two batches never lock the same jobs in opposite orders). At most
-- 10,000 ids a call.

-- Completes each job of `job_ids` executing under `worker` (with results[i] as the result of
-- job_ids[i] when `results` is given) and returns the ids it completed; an id left out of the
-- answer was not this worker's to complete (jobq_complete's false).
CREATE FUNCTION jobq_complete_many(worker uuid, job_ids bigint[], results jsonb[] DEFAULT NULL)
RETURNS bigint[] LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_done  bigint[] := '{}';
    r       record;
BEGIN
    PERFORM jobq._check_batch(worker, job_ids, results);
    PERFORM jobq._lock_children(job_ids);  -- src/sql/workflows.sql
    FOR r IN SELECT i.id, i.ord FROM unnest(job_ids) WITH ORDINALITY AS i(id, ord) ORDER BY i.id, i.ord LOOP
        IF public.jobq_complete(r.id, worker, results[r.ord]) THEN
            v_done := v_done || r.id;
        END IF;
    END LOOP;
    RETURN ARRAY(SELECT d FROM unnest(job_ids) d WHERE d = ANY (v_done));
END $$;

-- Fails each job of `job_ids` executing under `worker` (with errors[i] as the error of
-- job_ids[i] when `errors` is given) as jobq_fail does with its default backoff, and returns
-- the new states in job_ids order: 'ready', 'dead' or 'cancelled', NULL where the job was not
-- this worker's to fail.
CREATE FUNCTION jobq_fail_many(worker uuid, job_ids bigint[], errors jsonb[] DEFAULT NULL)
RETURNS text[] LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_states  text[] := array_fill(NULL::text, ARRAY[cardinality(job_ids)]);
    r         record;
BEGIN
    PERFORM jobq._check_batch(worker, job_ids, errors);
    PERFORM jobq._lock_children(job_ids);  -- src/sql/workflows.sql
    FOR r IN SELECT i.id, i.ord FROM unnest(job_ids) WITH ORDINALITY AS i(id, ord) ORDER BY i.id, i.ord LOOP
        v_states[r.ord] := public.jobq_fail(r.id, worker, errors[r.ord]);
    END LOOP;
    RETURN v_states;
END $$;

-- The arguments of a batch call: 22004 for a NULL worker, id list or id, 22023 for more than
-- 10,000 ids, a repeated id, or a list of results / errors of another length; 42501 for a
-- worker of another role, even with no id (each job's call would say it too).
CREATE FUNCTION jobq._check_batch(worker uuid, job_ids bigint[], per_job jsonb[]) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, pg_temp AS $$
BEGIN
    IF worker IS NULL OR job_ids IS NULL OR array_position(job_ids, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'jobq: worker, job_ids and every id must not be NULL' USING ERRCODE = '22004';
    ELSIF cardinality(job_ids) > 10000 THEN
        RAISE EXCEPTION 'jobq: at most 10000 job ids a call, got %', cardinality(job_ids) USING ERRCODE = '22023';
    ELSIF cardinality(job_ids) <> (SELECT count(DISTINCT d) FROM unnest(job_ids) d) THEN
        RAISE EXCEPTION 'jobq: job_ids must not repeat an id' USING ERRCODE = '22023';
    ELSIF per_job IS NOT NULL AND cardinality(per_job) <> cardinality(job_ids) THEN
        RAISE EXCEPTION 'jobq: % job ids but % results or errors', cardinality(job_ids), cardinality(per_job)
            USING ERRCODE = '22023';
    END IF;
    PERFORM jobq._refuse_foreign_worker(worker);
END $$;

-- One round trip and one commit per job, or per batch: the worker's protocol. Completes (or
-- fails) the jobs in hand through jobq_complete_many (jobq_fail_many), then checks out the
-- next ones through jobq_checkout, all in the caller's one transaction; `job_ids` empty for
-- the first call. Fencing is all or nothing: if any job in hand is no longer executing under
-- this worker (cancelled and finished, or reaped), the call raises JQ002 naming them and
-- nothing is completed, failed or checked out; a reaped or unknown worker gets JQ001, as
-- from jobq_checkout. Checks and refusals are those of the two calls (22004, 22023, 42501).
CREATE FUNCTION jobq._refuse_fenced(worker uuid, job_ids bigint[], kept bigint[]) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, pg_temp AS $$
BEGIN
    IF cardinality(kept) = cardinality(job_ids) THEN
        RETURN;
    END IF;
    PERFORM 1 FROM jobq.workers w
      WHERE w.id = worker AND jobq.worker_alive(w.heartbeat_at, w.backend_pid, w.backend_start);
    IF NOT FOUND THEN
        PERFORM jobq._refuse_worker(worker);
    END IF;
    RAISE EXCEPTION 'jobq: jobs % are no longer executing under worker %; nothing was finished or checked out',
        ARRAY(SELECT d FROM unnest(job_ids) d WHERE d <> ALL (kept)), worker
        USING ERRCODE = 'JQ002',
              HINT = 'Stop working on those jobs (cancelled, or finished elsewhere); finish the others and check out again.';
END $$;

CREATE FUNCTION jobq_complete_and_checkout(worker uuid, job_ids bigint[], results jsonb[] DEFAULT NULL,
                                           queues text[] DEFAULT NULL, max_jobs integer DEFAULT 1)
RETURNS SETOF jobq.job LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, jobq, pg_temp AS $$
BEGIN
    PERFORM jobq._refuse_fenced(worker, job_ids, public.jobq_complete_many(worker, job_ids, results));
    RETURN QUERY SELECT * FROM public.jobq_checkout(worker, queues, max_jobs);
END $$;

CREATE FUNCTION jobq_fail_and_checkout(worker uuid, job_ids bigint[], errors jsonb[] DEFAULT NULL,
                                       queues text[] DEFAULT NULL, max_jobs integer DEFAULT 1)
RETURNS SETOF jobq.job LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_states text[];
BEGIN
    v_states := public.jobq_fail_many(worker, job_ids, errors);
    PERFORM jobq._refuse_fenced(worker, job_ids, ARRAY(
        SELECT i.id FROM unnest(job_ids, v_states) AS i(id, state) WHERE i.state IS NOT NULL));
    RETURN QUERY SELECT * FROM public.jobq_checkout(worker, queues, max_jobs);
END $$;

-- ---- src/sql/pause.sql ----
-- Pausing: checkout skips a paused queue, a paused kind (in every queue, or in one queue).
-- Enqueue still works. Each pause is undone only by the resume with the same arguments.

CREATE FUNCTION jobq_pause(queue text, kind text DEFAULT NULL) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, jobq, pg_temp AS $$
BEGIN
    IF queue IS NULL AND kind IS NULL THEN
        RAISE EXCEPTION 'jobq: queue and kind must not both be NULL' USING ERRCODE = '22004';
    ELSIF queue = '' OR kind = '' THEN
        RAISE EXCEPTION 'jobq: queue and kind must not be empty (use NULL)' USING ERRCODE = '22023';
    ELSIF octet_length(queue) > 1000 OR octet_length(kind) > 1000 THEN
        RAISE EXCEPTION 'jobq: queue and kind must be at most 1000 bytes' USING ERRCODE = '22023';
    END IF;
    INSERT INTO jobq.pauses (queue, kind, paused_at) VALUES (queue, kind, clock_timestamp())
    ON CONFLICT DO NOTHING;
END $$;

CREATE FUNCTION jobq_resume(queue text, kind text DEFAULT NULL) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, jobq, pg_temp AS $$
BEGIN
    IF queue IS NULL AND kind IS NULL THEN
        RAISE EXCEPTION 'jobq: queue and kind must not both be NULL' USING ERRCODE = '22004';
    END IF;
    DELETE FROM jobq.pauses p
     WHERE p.queue IS NOT DISTINCT FROM jobq_resume.queue AND p.kind IS NOT DISTINCT FROM jobq_resume.kind;
    -- Wake the workers of a resumed queue (waiting checkouts: all of them; of every queue
    -- when a kind is resumed everywhere).
    IF FOUND THEN
        PERFORM jobq._wake(queue, '-infinity', 10000);
        IF queue IS NOT NULL THEN
            PERFORM jobq._notify(queue);
        END IF;
    END IF;
END $$;

-- ---- src/sql/schedules.sql ----
-- Recurring jobs: jobq_schedule, jobq_unschedule, the view jobq.schedules, and
-- jobq._enqueue_due_ticks, which every reap pass runs (the background worker's, or any
-- jobq_reap() call). When ticks fall is src/schedules.rs (jobq._cron_next, jobq._cron_latest).
--
-- Exactly one job per tick: a schedule's row says which tick comes next (next_run_at). A pass
-- locks each due row with SKIP LOCKED, enqueues its due ticks and moves next_run_at past them
-- in the same transaction, so a tick's job and the row's move commit together or not at all:
-- a concurrent pass skips the row (or, once it is committed, sees it no longer due), a crash
-- before the commit leaves neither, and a standby promoted after a failover has both or
-- neither, as it has every other row.

CREATE TABLE jobq.crontab (
    name          text PRIMARY KEY,
    cron          text NOT NULL,
    time_zone     text NOT NULL,
    queue         text NOT NULL,
    payload       jsonb NOT NULL,
    kind          text,
    priority      integer NOT NULL,
    max_attempts  integer NOT NULL,
    catch_up      boolean NOT NULL,
    next_run_at   timestamptz NOT NULL,    -- the next tick to enqueue
    last_run_at   timestamptz,             -- the last tick enqueued
    updated_at    timestamptz NOT NULL
);
CREATE INDEX crontab_due ON jobq.crontab (next_run_at);

CREATE VIEW jobq.schedules AS
SELECT c.name, c.cron, c.time_zone, c.queue, c.kind, c.next_run_at, c.last_run_at,
       c.payload, c.priority, c.max_attempts, c.catch_up
  FROM jobq.crontab c;

-- Enqueues the due ticks of schedule `s` (its row locked by the caller) up to `now` — all
-- of them with catch_up, else only the latest — and moves the row past them. At most 1,000
-- per call: a schedule further behind (catch_up after a
-- long downtime) goes on in the next passes, so no pass becomes a long transaction.
CREATE FUNCTION jobq._enqueue_ticks(s jobq.crontab, now timestamptz) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_tick  timestamptz := s.next_run_at;
    v_last  timestamptz := s.last_run_at;
    v_n     integer := 0;
BEGIN
    IF NOT s.catch_up THEN
        v_tick := greatest(v_tick, jobq._cron_latest(s.cron, s.time_zone, now));
    END IF;
    WHILE v_tick <= now AND v_n < 1000 LOOP
        PERFORM public.jobq_enqueue(s.queue, s.payload, s.kind, s.priority, v_tick, s.max_attempts);
        v_last := v_tick;
        v_n := v_n + 1;
        v_tick := jobq._cron_next(s.cron, s.time_zone, v_tick);
    END LOOP;
    UPDATE jobq.crontab c SET next_run_at = v_tick, last_run_at = v_last WHERE c.name = s.name;
END $$;

-- The reap pass's part: every due schedule that no other transaction holds. A schedule whose
-- enqueue fails is logged and left for the next pass; under REPEATABLE READ a row another
-- pass moved since this transaction's snapshot ends this step (40001 caught) and the next
-- pass goes on.
CREATE FUNCTION jobq._enqueue_due_ticks(now timestamptz) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    s  jobq.crontab;
BEGIN
    BEGIN
        FOR s IN
            SELECT c.* FROM jobq.crontab c WHERE c.next_run_at <= now ORDER BY c.next_run_at
               FOR UPDATE SKIP LOCKED
        LOOP
            BEGIN
                PERFORM jobq._enqueue_ticks(s, now);
            EXCEPTION WHEN serialization_failure THEN
                RAISE;  -- ends this step (below)
            WHEN OTHERS THEN
                RAISE WARNING 'jobq: schedule "%" failed to enqueue: % (SQLSTATE %); a later pass retries',
                    s.name, SQLERRM, SQLSTATE;
            END;
        END LOOP;
    EXCEPTION WHEN serialization_failure THEN
        NULL;
    END;
END $$;

CREATE FUNCTION jobq_schedule(
    name          text,
    cron          text,
    queue         text,
    payload       jsonb   DEFAULT '{}',
    kind          text    DEFAULT NULL,
    priority      integer DEFAULT 0,
    max_attempts  integer DEFAULT 25,
    time_zone     text    DEFAULT 'UTC',
    catch_up      boolean DEFAULT false
) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_now   timestamptz := clock_timestamp();
    v_next  timestamptz;
    s       jobq.crontab;
BEGIN
    IF name IS NULL OR cron IS NULL OR queue IS NULL OR payload IS NULL OR priority IS NULL
       OR max_attempts IS NULL OR time_zone IS NULL OR catch_up IS NULL THEN
        RAISE EXCEPTION 'jobq: name, cron, queue, payload, priority, max_attempts, time_zone and catch_up must not be NULL'
            USING ERRCODE = '22004';
    ELSIF name = '' OR queue = '' THEN
        RAISE EXCEPTION 'jobq: name and queue must not be empty' USING ERRCODE = '22023';
    ELSIF octet_length(name) > 1000 OR octet_length(queue) > 1000 OR octet_length(kind) > 1000 THEN
        RAISE EXCEPTION 'jobq: name, queue and kind must be at most 1000 bytes' USING ERRCODE = '22023';
    ELSIF max_attempts < 1 THEN
        RAISE EXCEPTION 'jobq: max_attempts must be at least 1, got %', max_attempts USING ERRCODE = '22023';
    END IF;
    PERFORM jobq._cron_next(cron, time_zone, v_now);  -- 22023 for a bad expression or zone
    -- Replacing takes effect from the next tick: what the old definition made due before
    -- this call is enqueued first, as the next pass would have. The time is read once the
    -- row is ours: a pass that moved the row while we waited enqueued ticks up to its own
    -- time, and the next tick is computed from a later one.
    SELECT c.* INTO s FROM jobq.crontab c WHERE c.name = jobq_schedule.name FOR UPDATE;
    v_now := clock_timestamp();
    IF s.next_run_at <= v_now THEN  -- (NULL when there was no such schedule)
        PERFORM jobq._enqueue_ticks(s, v_now);
    END IF;
    v_next := jobq._cron_next(cron, time_zone, v_now);
    INSERT INTO jobq.crontab AS c (name, cron, time_zone, queue, payload, kind, priority, max_attempts,
                                   catch_up, next_run_at, updated_at)
    VALUES (name, cron, time_zone, queue, payload, kind, priority, max_attempts, catch_up, v_next, v_now)
    ON CONFLICT ON CONSTRAINT crontab_pkey DO UPDATE
       SET cron = EXCLUDED.cron, time_zone = EXCLUDED.time_zone, queue = EXCLUDED.queue,
           payload = EXCLUDED.payload, kind = EXCLUDED.kind, priority = EXCLUDED.priority,
           max_attempts = EXCLUDED.max_attempts, catch_up = EXCLUDED.catch_up,
           next_run_at = EXCLUDED.next_run_at, updated_at = EXCLUDED.updated_at;
END $$;

CREATE FUNCTION jobq_unschedule(name text) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, jobq, pg_temp AS $$
BEGIN
    IF name IS NULL THEN
        RAISE EXCEPTION 'jobq: name must not be NULL' USING ERRCODE = '22004';
    END IF;
    DELETE FROM jobq.crontab c WHERE c.name = jobq_unschedule.name;
    RETURN FOUND;
END $$;

-- ---- src/sql/counters.sql ----
-- The dashboard's counters: per queue and minute, what jobs did (src/counters.rs keeps them
-- in shared memory as jobs move; every reap pass adds them here and prunes the old minutes).
-- A dashboard reads jobq.throughput(), which never reads the job history: a page costs the
-- same at 10 million finished jobs.

-- One row per queue and minute with activity. The minute is the start of the minute when it
-- happened (the end of the attempt for completed, failed and dead; the start for started).
-- wait_ms and run_ms are histograms: the number of jobs per bucket of
-- jobq.histogram_bounds() (milliseconds), of the wait from due (run_at) to started and of
-- the run from started to completed or failed; wait_us and run_us are their sums, in
-- microseconds.
CREATE TABLE jobq.queue_minutes (
    queue      text        NOT NULL,
    minute     timestamptz NOT NULL,
    enqueued   bigint      NOT NULL,
    started    bigint      NOT NULL,
    completed  bigint      NOT NULL,
    failed     bigint      NOT NULL,  -- attempts that failed (jobq_fail) or were interrupted (reaped)
    dead       bigint      NOT NULL,  -- jobs that became dead
    wait_ms    bigint[]    NOT NULL,
    run_ms     bigint[]    NOT NULL,
    wait_us    bigint      NOT NULL DEFAULT 0,
    run_us     bigint      NOT NULL DEFAULT 0,
    PRIMARY KEY (queue, minute)
);
CREATE INDEX queue_minutes_by_minute ON jobq.queue_minutes (minute);

-- The same counts per queue since it was first counted, never pruned: counters that only go
-- up, for monitoring systems (Prometheus' counters and histograms, jobq-dash's /metrics).
CREATE TABLE jobq.queue_totals (
    queue      text     PRIMARY KEY,
    enqueued   bigint   NOT NULL,
    started    bigint   NOT NULL,
    completed  bigint   NOT NULL,
    failed     bigint   NOT NULL,
    dead       bigint   NOT NULL,
    wait_ms    bigint[] NOT NULL,
    run_ms     bigint[] NOT NULL,
    wait_us    bigint   NOT NULL,
    run_us     bigint   NOT NULL
);

-- The sum of histograms, bucket by bucket.
CREATE AGGREGATE jobq.histogram_sum(bigint[]) (
    SFUNC = jobq._histogram_add, STYPE = bigint[], INITCOND = '{}', PARALLEL = SAFE
);

-- The reap pass's part (jobq._reap): adds what shared memory counted since the last pass to
-- jobq.queue_minutes and jobq.queue_totals, and prunes minutes older than jobq.retention, or than an hour when
-- retention is shorter (the dashboard's hour chart). One pass at a time: two would wait on
-- each other's rows until their commits (and a pass never waits, see reap.sql), so a pass that
-- finds another one flushing leaves the counts in shared memory for its next turn. A pass
-- that does not commit gives its counts back to shared memory (src/counters.rs).
CREATE FUNCTION jobq._flush_tallies(now timestamptz, keep interval) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, pg_temp AS $$
BEGIN
    -- A transaction-level advisory lock of class 'jobq', as in jobq._take_slot.
    IF NOT pg_try_advisory_xact_lock(1785684593, hashtext('jobq.queue_minutes')) THEN
        RETURN;
    END IF;
    WITH t AS (
        SELECT * FROM jobq._take_tallies()
    ), minutes AS (
        INSERT INTO jobq.queue_minutes AS m
        SELECT * FROM t
        ON CONFLICT (queue, minute) DO UPDATE
           SET enqueued = m.enqueued + excluded.enqueued, started = m.started + excluded.started,
               completed = m.completed + excluded.completed, failed = m.failed + excluded.failed,
               dead = m.dead + excluded.dead,
               wait_ms = jobq._histogram_add(m.wait_ms, excluded.wait_ms),
               run_ms = jobq._histogram_add(m.run_ms, excluded.run_ms),
               wait_us = m.wait_us + excluded.wait_us, run_us = m.run_us + excluded.run_us
    )
    INSERT INTO jobq.queue_totals AS q
    SELECT t.queue, sum(t.enqueued), sum(t.started), sum(t.completed), sum(t.failed), sum(t.dead),
           jobq.histogram_sum(t.wait_ms), jobq.histogram_sum(t.run_ms), sum(t.wait_us), sum(t.run_us)
      FROM t
     GROUP BY t.queue
    ON CONFLICT (queue) DO UPDATE
       SET enqueued = q.enqueued + excluded.enqueued, started = q.started + excluded.started,
           completed = q.completed + excluded.completed, failed = q.failed + excluded.failed,
           dead = q.dead + excluded.dead,
           wait_ms = jobq._histogram_add(q.wait_ms, excluded.wait_ms),
           run_ms = jobq._histogram_add(q.run_ms, excluded.run_ms),
           wait_us = q.wait_us + excluded.wait_us, run_us = q.run_us + excluded.run_us;
    DELETE FROM jobq.queue_minutes m WHERE m.minute < now - greatest(keep, interval '1 hour');
END $$;

-- Throughput and latency per queue since `since`, in buckets of `step` (a whole number of
-- minutes, at most a day; buckets start at multiples of `step` since 2000-01-01 UTC): one row
-- per queue and bucket with activity. Percentiles are in milliseconds, NULL when nothing was
-- measured in the bucket.
CREATE FUNCTION jobq.throughput(since timestamptz, step interval DEFAULT '1 minute')
RETURNS TABLE (queue text, bucket timestamptz, enqueued bigint, started bigint, completed bigint,
               failed bigint, dead bigint, wait_p50_ms double precision, wait_p95_ms double precision,
               run_p50_ms double precision, run_p95_ms double precision)
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_origin constant timestamptz := '2000-01-01 00:00:00+00';
BEGIN
    IF since IS NULL OR step IS NULL THEN
        RAISE EXCEPTION 'jobq: since and step must not be NULL' USING ERRCODE = '22004';
    ELSIF NOT isfinite(since) THEN
        RAISE EXCEPTION 'jobq: since must be a finite time, got %', since USING ERRCODE = '22023';
    ELSIF step < interval '1 minute' OR step > interval '1 day' OR extract(month FROM step) <> 0
          OR extract(epoch FROM step)::numeric % 60 <> 0 THEN
        RAISE EXCEPTION 'jobq: step must be a whole number of minutes, at most a day, got %', step
            USING ERRCODE = '22023';
    END IF;
    RETURN QUERY
    SELECT m.queue, date_bin(step, m.minute, v_origin) AS b,
           sum(m.enqueued)::bigint, sum(m.started)::bigint, sum(m.completed)::bigint,
           sum(m.failed)::bigint, sum(m.dead)::bigint,
           jobq.histogram_quantile(jobq.histogram_sum(m.wait_ms), 0.5),
           jobq.histogram_quantile(jobq.histogram_sum(m.wait_ms), 0.95),
           jobq.histogram_quantile(jobq.histogram_sum(m.run_ms), 0.5),
           jobq.histogram_quantile(jobq.histogram_sum(m.run_ms), 0.95)
      FROM jobq.queue_minutes m
     WHERE m.minute >= date_bin(step, since, v_origin)
     GROUP BY m.queue, b
     ORDER BY m.queue, b;
END $$;

-- ---- src/sql/reap.sql ----
-- Reaping: crash recovery. One pass removes dead workers (their executing jobs go back to
-- the queue, their locks are released), releases expired locks and prunes old finished jobs.
--
-- A pass never waits for a row another transaction holds: every step takes its rows with
-- SKIP LOCKED, so concurrent passes share the work instead of queueing behind each other (and
-- no job is requeued twice), and a row held by an open transaction anywhere (a jobq_cancel
-- or a jobq_complete left uncommitted) is passed over and picked up by a later pass. Each
-- dead worker is recovered in a subtransaction of its own: an error there is logged and
-- undoes that worker's recovery only. The one wait SKIP LOCKED cannot avoid, re-taking an
-- until_executing key that another open transaction is inserting, is cut short by the
-- function's lock_timeout and retried by a later pass.

CREATE FUNCTION jobq._retention() RETURNS interval
LANGUAGE sql STABLE PARALLEL SAFE SET search_path = pg_catalog, jobq, pg_temp
AS $$ SELECT jobq.retention_ms() * interval '1 millisecond' $$;

-- Recovers what the dead (or deleted) worker `worker` left: its executing jobs go back to the
-- queue or die, its locks are released, and its row is deleted once nothing of it is left
-- (`removed`). Rows another transaction holds stay for a later pass.
CREATE FUNCTION jobq._reap_worker(worker uuid, OUT requeued integer, OUT dead integer,
                                  OUT locks integer, OUT removed boolean)
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, pg_temp AS $$
BEGIN
    BEGIN
        SELECT r.requeued, r.dead INTO requeued, dead
          FROM jobq._return_jobs(worker, true, ARRAY(
                   SELECT j.id FROM jobq.live_jobs j
                    WHERE j.worker_id = worker AND j.state = 'executing'
                    ORDER BY j.id
                      FOR UPDATE SKIP LOCKED)) r;
        DELETE FROM jobq.locks l
         WHERE l.key = ANY (ARRAY(SELECT k.key FROM jobq.locks k WHERE k.worker_id = worker
                                     FOR UPDATE SKIP LOCKED))
           AND l.worker_id = worker;
        GET DIAGNOSTICS locks = ROW_COUNT;
        DELETE FROM jobq.workers w
         WHERE w.id = worker
           AND NOT EXISTS (SELECT 1 FROM jobq.live_jobs j WHERE j.worker_id = worker AND j.state = 'executing')
           AND NOT EXISTS (SELECT 1 FROM jobq.locks l WHERE l.worker_id = worker);
        removed := FOUND;
    EXCEPTION WHEN OTHERS THEN
        RAISE WARNING 'jobq: recovering worker % failed: % (SQLSTATE %); a later pass retries',
            worker, SQLERRM, SQLSTATE;
        requeued := 0; dead := 0; locks := 0; removed := false;
    END;
END $$;

CREATE FUNCTION jobq._reap(
    OUT workers_reaped integer, OUT jobs_requeued integer, OUT jobs_dead integer,
    OUT locks_released integer, OUT jobs_pruned integer)
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, pg_temp SET lock_timeout = '100ms' SET jit = off AS $$
DECLARE
    v_now     timestamptz := clock_timestamp();
    v_cutoff  timestamptz := v_now - jobq._retention();  -- once, not per row scanned
    w         record;
    r         record;
    n         integer;
BEGIN
    workers_reaped := 0; jobs_requeued := 0; jobs_dead := 0; locks_released := 0; jobs_pruned := 0;
    -- A compaction of the hot tables in progress is waited for, and none starts before this
    -- transaction ends; 40001 for a manual jobq_reap() in an older REPEATABLE READ snapshot,
    -- which would see no job of a dead worker to requeue (src/compact.rs).
    PERFORM jobq._hold_hot_tables();

    -- A worker counts as alive while a checkout of it waits (src/waits.rs): the heartbeat of
    -- a live worker that waits now is refreshed before anyone is judged.
    UPDATE jobq.workers x SET heartbeat_at = v_now
     WHERE x.id IN (SELECT y.id FROM jobq.workers y
                     WHERE y.id = ANY (jobq._waiting_workers())
                       AND jobq.worker_alive(y.heartbeat_at, y.backend_pid, y.backend_start)
                       FOR UPDATE SKIP LOCKED);

    -- Dead workers, then orphaned jobs: executing under a worker that no longer exists.
    -- Checkout does not lock the worker's row, so a checkout that overlapped the pass that
    -- reaped its worker can commit its claims after that pass; they are interrupted attempts
    -- like any other. FOR UPDATE rechecks liveness on the newest row (a heartbeat that
    -- committed meanwhile saves the worker); SKIP LOCKED leaves a worker that another pass,
    -- an unregister or a heartbeat holds to them.
    FOR w IN
        SELECT x.id FROM jobq.workers x
         WHERE NOT jobq.worker_alive(x.heartbeat_at, x.backend_pid, x.backend_start)
         ORDER BY x.id
           FOR UPDATE SKIP LOCKED
    LOOP
        SELECT * INTO r FROM jobq._reap_worker(w.id);
        jobs_requeued := jobs_requeued + r.requeued;
        jobs_dead := jobs_dead + r.dead;
        locks_released := locks_released + r.locks;
        workers_reaped := workers_reaped + r.removed::integer;
    END LOOP;
    FOR w IN
        SELECT DISTINCT j.worker_id AS id FROM jobq.live_jobs j
         WHERE j.state = 'executing'
           AND NOT EXISTS (SELECT 1 FROM jobq.workers x WHERE x.id = j.worker_id)
    LOOP
        SELECT * INTO r FROM jobq._reap_worker(w.id);
        jobs_requeued := jobs_requeued + r.requeued;
        jobs_dead := jobs_dead + r.dead;
    END LOOP;

    -- Locks past their ttl.
    DELETE FROM jobq.locks l
     WHERE l.key = ANY (ARRAY(SELECT k.key FROM jobq.locks k
                               WHERE k.worker_id IS NOT NULL AND k.expires_at <= v_now
                                 FOR UPDATE SKIP LOCKED))
       AND l.expires_at <= v_now;
    GET DIAGNOSTICS n = ROW_COUNT;
    locks_released := locks_released + n;

    -- Recurring jobs: the due ticks of every schedule (src/sql/schedules.sql). Not part of
    -- what jobq_reap() returns (the contract fixes its columns); jobq.schedules shows them.
    PERFORM jobq._enqueue_due_ticks(v_now);

    -- The dashboard's counters: what shared memory counted since the last pass goes to
    -- jobq.queue_minutes (src/sql/counters.sql).
    PERFORM jobq._flush_tallies(v_now, jobq._retention());

    -- Workflows: timed-out awaits, old events (src/sql/workflows.sql).
    PERFORM jobq._workflow_pass(v_now, v_cutoff);

    -- Finished jobs past retention, oldest first, in batches of 10,000 until none is left
    -- or the pass has pruned for a second (the rest waits for the next pass), so pruning
    -- keeps up with any completion rate without one pass becoming a long transaction.
    -- The rows are ours, locked by the subquery (a jobq_retry holding one keeps it).
    LOOP
        WITH pruned AS (
            DELETE FROM jobq.finished_jobs j
             WHERE j.id = ANY (ARRAY(SELECT f.id FROM jobq.finished_jobs f
                                      WHERE f.finished_at < v_cutoff
                                        -- kept while a job that depends on it or awaits it is not finished
                                        AND NOT EXISTS (SELECT 1 FROM jobq.edges e JOIN jobq.live_jobs c ON c.id = e.child
                                                         WHERE e.parent = f.id)
                                      ORDER BY f.finished_at
                                      LIMIT 10000
                                        FOR UPDATE SKIP LOCKED))
            RETURNING j.id
        ), edges AS (
            -- a pruned job's own edges go with it (src/sql/workflows.sql)
            DELETE FROM jobq.edges e WHERE e.child IN (SELECT p.id FROM pruned p)
        )
        SELECT count(*) INTO n FROM pruned;
        jobs_pruned := jobs_pruned + n;
        EXIT WHEN n < 10000 OR clock_timestamp() - v_now > interval '1 second';
    END LOOP;
END $$;

-- One whole pass, as the background worker runs it each tick (and, in the SQL edition, pg_cron
-- or the client libraries' workers), noted for jobq.health like the background worker's.
CREATE FUNCTION jobq_reap()
RETURNS TABLE (workers_reaped integer, jobs_requeued integer, jobs_dead integer,
               locks_released integer, jobs_pruned integer)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_start timestamptz := clock_timestamp();
BEGIN
    SELECT r.workers_reaped, r.jobs_requeued, r.jobs_dead, r.locks_released, r.jobs_pruned
      INTO workers_reaped, jobs_requeued, jobs_dead, locks_released, jobs_pruned
      FROM jobq._reap() r;
    PERFORM jobq._note_pass(clock_timestamp(), (extract(epoch FROM clock_timestamp() - v_start) * 1e6)::bigint,
                            ARRAY[workers_reaped, jobs_requeued, jobs_dead, locks_released, jobs_pruned], NULL);
    RETURN NEXT;
END $$;

-- What the background worker runs each tick: one pass, its errors logged rather than
-- raised, so a bad pass never stops the next one. The pass's outcome is noted for
-- jobq.health (src/health.rs).
CREATE FUNCTION jobq._reap_pass() RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_start   timestamptz := clock_timestamp();
    v_counts  integer[] := ARRAY[0, 0, 0, 0, 0];
    v_error   text;
    r         record;
BEGIN
    BEGIN
        SELECT * INTO r FROM jobq._reap();
        v_counts := ARRAY[r.workers_reaped, r.jobs_requeued, r.jobs_dead, r.locks_released, r.jobs_pruned];
        IF r.workers_reaped + r.jobs_requeued + r.jobs_dead + r.locks_released + r.jobs_pruned > 0 THEN
            RAISE LOG 'jobq reaper: % workers reaped, % jobs requeued, % jobs dead, % locks released, % jobs pruned',
                r.workers_reaped, r.jobs_requeued, r.jobs_dead, r.locks_released, r.jobs_pruned;
        END IF;
    EXCEPTION WHEN OTHERS THEN
        v_error := format('%s (SQLSTATE %s)', SQLERRM, SQLSTATE);
        RAISE WARNING 'jobq reaper: pass failed: %', v_error;
    END;
    PERFORM jobq._note_pass(clock_timestamp(), (extract(epoch FROM clock_timestamp() - v_start) * 1e6)::bigint,
                            v_counts, v_error);
END $$;

-- CREATE EXTENSION tells the launcher to serve this database from its commit on
-- (src/bgworker.rs), and says so where no background worker will: without the preload, or
-- with jobq.database naming another database, nothing reaps here unless something calls
-- jobq_reap().
DO $$
DECLARE
    v_preloaded boolean;
BEGIN
    IF NOT jobq._serve_database() THEN
        v_preloaded := 'jobq' = ANY (string_to_array(replace(current_setting('shared_preload_libraries'), ' ', ''), ','));
        RAISE WARNING 'jobq: no background worker reaps database "%"', current_database()
            USING DETAIL = CASE WHEN NOT v_preloaded THEN 'jobq is not in shared_preload_libraries.'
                                ELSE format('The background worker serves database "%s" (jobq.database) only.',
                                            current_setting('jobq.database', true)) END,
                  HINT = 'Until it does, dead workers are reaped and old jobs pruned only when something calls jobq_reap() (every few seconds).';
    END IF;
END $$;

-- ---- src/sql/stats.sql ----
-- Observing: the per-queue summary dashboards read.

-- One row per queue with a job not yet pruned, at the cost of the unfinished jobs and of the
-- queues, whatever the history: the unfinished jobs are counted in jobq.live_jobs (the work in
-- flight), the dead ones through jobs_finished_unusual (of the history, only dead and cancelled
-- jobs have an entry there), and the queues of the rest of the history are found by one descent
-- of jobs_finished_by_queue per queue (the first queue name after the one before), without
-- reading their jobs. bench/dash.sh measures it over 10 million finished jobs.
CREATE VIEW jobq.queue_stats AS
WITH RECURSIVE t AS MATERIALIZED (SELECT clock_timestamp() AS now),
history (queue) AS (
    (SELECT f.queue FROM jobq.finished_jobs f ORDER BY f.queue LIMIT 1)
    UNION ALL
    SELECT (SELECT f.queue FROM jobq.finished_jobs f WHERE f.queue > h.queue ORDER BY f.queue LIMIT 1)
      FROM history h
     WHERE h.queue IS NOT NULL
),
live AS (
    SELECT j.queue,
           count(*) FILTER (WHERE j.state = 'ready' AND j.run_at <= t.now) AS ready,
           count(*) FILTER (WHERE j.state = 'ready' AND j.run_at > t.now) AS scheduled,
           count(*) FILTER (WHERE j.state = 'executing') AS executing,
           min(j.run_at) FILTER (WHERE j.state = 'ready' AND j.run_at <= t.now) AS oldest_due
      FROM jobq.live_jobs j CROSS JOIN t
     GROUP BY j.queue
),
dead AS (
    SELECT f.queue, count(*) AS dead FROM jobq.finished_jobs f WHERE f.state = 'dead' GROUP BY f.queue
),
queues AS (
    SELECT h.queue FROM history h WHERE h.queue IS NOT NULL
    UNION
    SELECT l.queue FROM live l
)
SELECT q.queue,
       coalesce(l.ready, 0) AS ready,
       coalesce(l.scheduled, 0) AS scheduled,
       coalesce(l.executing, 0) AS executing,
       coalesce(d.dead, 0) AS dead,
       t.now - l.oldest_due AS oldest_ready_age
  FROM queues q CROSS JOIN t
  LEFT JOIN live l ON l.queue = q.queue
  LEFT JOIN dead d ON d.queue = q.queue;

-- The same columns, one row per queue with a waiting, executing or dead job only (not the
-- queues whose jobs all completed or were cancelled): what the dashboard's pages show.
CREATE VIEW jobq.queue_depths AS
WITH t AS MATERIALIZED (SELECT clock_timestamp() AS now),
parts AS (
    SELECT j.queue,
           count(*) FILTER (WHERE j.state = 'ready' AND j.run_at <= t.now) AS ready,
           count(*) FILTER (WHERE j.state = 'ready' AND j.run_at > t.now) AS scheduled,
           count(*) FILTER (WHERE j.state = 'executing') AS executing,
           0 AS dead,
           min(j.run_at) FILTER (WHERE j.state = 'ready' AND j.run_at <= t.now) AS oldest_due
      FROM jobq.live_jobs j CROSS JOIN t
     GROUP BY j.queue
    UNION ALL
    -- Named columns: pg_dump writes this arm back as it reads it (an unnamed NULL comes back
    -- from a restore named after its type).
    SELECT f.queue, 0, 0, 0, count(*) AS dead, NULL::timestamptz AS oldest_due
      FROM jobq.finished_jobs f
     WHERE f.state = 'dead'
     GROUP BY f.queue
)
SELECT p.queue, sum(p.ready)::bigint AS ready, sum(p.scheduled)::bigint AS scheduled,
       sum(p.executing)::bigint AS executing, sum(p.dead)::bigint AS dead,
       t.now - min(p.oldest_due) AS oldest_ready_age
  FROM parts p CROSS JOIN t
 GROUP BY p.queue, t.now;

-- ---- src/sql/node.sql ----
-- Scale-out (the contract, "Scale-out: several servers behind PL/Proxy"): each node's job ids name
-- the node that made them, id % 1024 = node, so that a proxy routes a call about a job id to
-- the node that holds the job. The id sequence counts in steps of 1,024 from 1,024 + node.

CREATE FUNCTION jobq_set_node(node integer) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, jobq, pg_temp AS $$
BEGIN
    IF node IS NULL THEN
        RAISE EXCEPTION 'jobq: node must not be NULL' USING ERRCODE = '22004';
    ELSIF node < 0 OR node >= 1024 THEN
        RAISE EXCEPTION 'jobq: node must be between 0 and 1023, got %', node USING ERRCODE = '22023';
    END IF;
    -- ALTER SEQUENCE locks the sequence against nextval until this transaction ends, so no id
    -- can be drawn between the check and the restart.
    ALTER SEQUENCE jobq.jobs_id_seq INCREMENT BY 1024;
    IF (SELECT s.is_called FROM jobq.jobs_id_seq s) THEN
        RAISE EXCEPTION 'jobq: this node has already made a job id; its node can only be set before the first'
            USING ERRCODE = '55000',
                  HINT = 'Set the node right after CREATE EXTENSION jobq, before anything is enqueued.';
    END IF;
    EXECUTE format('ALTER SEQUENCE jobq.jobs_id_seq RESTART WITH %s', 1024 + node);
END $$;

-- ---- src/sql/observe.sql ----
-- Observing, for dashboards (jobq_reader reads all of it; privileges.sql): what keys and rate
-- limits hold, how jobq's tables and the background worker are doing. Each view reads small
-- tables or statistics, never the job history: a page load costs the same at 10 million jobs.
-- (The per-queue summary is jobq.queue_stats, src/sql/stats.sql; schedules are
-- jobq.schedules, src/sql/schedules.sql.)

-- Concurrency slots in use: one row per concurrency or while_executing key with executing jobs.
CREATE VIEW jobq.concurrency_slots AS
SELECT CASE s.ns WHEN 'c' THEN 'concurrency' ELSE 'while_executing' END AS kind,
       s.key,
       count(*) AS executing,
       max(CASE WHEN s.ns = 'c' THEN j.concurrency_limit ELSE 1 END) AS max_limit,
       min(j.started_at) AS oldest_started_at
  FROM jobq.live_jobs j  -- before jobq.slots: the hot tables' lock order (src/sql/compact.sql)
  JOIN jobq.slots s ON s.job_id = j.id
 GROUP BY s.ns, s.key;

-- Rate limits and their windows now: starts in the last `per` (one per slot whose last start
-- is that recent, src/sql/rate_limits.sql) and, when the window is full, when the next start
-- may come.
CREATE VIEW jobq.rate_windows AS
WITH t AS MATERIALIZED (SELECT clock_timestamp() AS now)
SELECT l.key, l.max_starts, l.per,
       count(s.slot) FILTER (WHERE s.last_start > t.now - l.per) AS starts_in_window,
       CASE WHEN count(s.slot) FILTER (WHERE s.last_start > t.now - l.per) >= l.max_starts
            THEN min(s.last_start) FILTER (WHERE s.slot <= l.max_starts) + l.per END AS next_start_at
  FROM jobq.rate_limits l
 CROSS JOIN t
  LEFT JOIN jobq.rate_slots s ON s.key = l.key
 GROUP BY l.key, l.max_starts, l.per, t.now;

-- jobq's tables as the statistics collector sees them: dead rows are what a snapshot held
-- elsewhere keeps (docs/operations.md, "Long transactions elsewhere"). Sizes are the catalog's page counts
-- of the table and its indexes (as of their last vacuum or analyze), not pg_relation_size(),
-- which locks the table: a dashboard must not hang behind a table's ACCESS EXCLUSIVE lock.
CREATE VIEW jobq.table_stats AS
SELECT s.relname::text AS table_name, s.n_live_tup AS live_rows, s.n_dead_tup AS dead_rows,
       round(s.n_dead_tup::numeric / nullif(s.n_live_tup + s.n_dead_tup, 0), 3) AS dead_share,
       (c.relpages + coalesce((SELECT sum(i.relpages) FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid
                                WHERE x.indrelid = s.relid), 0))::bigint
           * current_setting('block_size')::bigint AS approx_bytes,
       greatest(s.last_autovacuum, s.last_vacuum) AS last_vacuum
  FROM pg_stat_user_tables s
  JOIN pg_class c ON c.oid = s.relid
 WHERE s.schemaname = 'jobq';

-- What holds back vacuum of this database's tables, jobq's included, the oldest first: a
-- session's snapshot or transaction id, a replication slot, a prepared transaction. Runs as
-- the extension's owner so that a jobq_reader sees other roles' sessions (their role, state
-- and ages; not their queries).
CREATE FUNCTION jobq._oldest_horizon()
RETURNS TABLE (holder text, pid integer, role text, state text, xact_age interval, xmin_age integer)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, jobq, pg_temp AS $$
    SELECT h.* FROM (
        SELECT 'session'::text, a.pid, a.usename::text, a.state, clock_timestamp() - a.xact_start,
               age(coalesce(a.backend_xmin, a.backend_xid))
          FROM pg_stat_activity a
         WHERE a.datname = current_database() AND a.pid <> pg_backend_pid()
           AND coalesce(a.backend_xmin, a.backend_xid) IS NOT NULL
           -- A vacuum's snapshot holds back no other vacuum (PROC_IN_VACUUM).
           AND a.backend_type <> 'autovacuum worker'
        UNION ALL
        SELECT 'replication slot ' || r.slot_name, r.active_pid, NULL, CASE WHEN r.active THEN 'active' ELSE 'inactive' END,
               NULL, age(r.xmin)
          FROM pg_replication_slots r
         WHERE r.xmin IS NOT NULL
        UNION ALL
        SELECT 'prepared transaction ' || p.gid, NULL, p.owner::text, 'prepared', clock_timestamp() - p.prepared,
               age(p.transaction)
          FROM pg_prepared_xacts p
         WHERE p.database = current_database()
    ) AS h (holder, pid, role, state, xact_age, xmin_age)
    -- Ties (every snapshot taken while a transaction runs has that transaction's id as its
    -- xmin): the one open longest.
    ORDER BY h.xmin_age DESC, h.xact_age DESC NULLS LAST
    LIMIT 1
$$;

-- One row: this database's background worker (its last reap pass since the server started,
-- src/health.rs; NULL columns when none ran: no preload, or not served), the oldest holder of
-- the vacuum horizon, the dead-row share of jobq's tables, and how full PostgreSQL's NOTIFY
-- queue is (0 to 1; a full queue makes NOTIFY fail).
CREATE VIEW jobq.health AS
SELECT current_database()::text AS database,
       p.ended_at AS last_pass_at, p.took_ms AS last_pass_ms, p.error AS last_pass_error,
       p.workers_reaped, p.jobs_requeued, p.jobs_dead, p.locks_released, p.jobs_pruned,
       h.holder AS horizon_holder, h.pid AS horizon_pid, h.role AS horizon_role, h.state AS horizon_state,
       h.xact_age AS horizon_xact_age, h.xmin_age AS horizon_xmin_age,
       (SELECT round(sum(t.dead_rows)::numeric / nullif(sum(t.live_rows + t.dead_rows), 0), 3)
          FROM jobq.table_stats t) AS dead_share,
       pg_notification_queue_usage() AS notify_queue_usage
  FROM (SELECT) AS one
  LEFT JOIN jobq._last_pass() p ON true
  LEFT JOIN jobq._oldest_horizon() h ON true;

-- jobq_version(): the release installed here, and its edition: 'extension' (this library) or
-- 'sql' (the SQL edition, jobq-sql--V.sql, where jobq._edition is SQL).
CREATE FUNCTION jobq_version() RETURNS TABLE (version text, edition text)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, jobq, pg_temp
AS $$ SELECT e.version, e.edition FROM jobq._edition() e $$;

-- ---- src/sql/compact.sql ----
-- Compaction of the hot tables (docs/internals.md, "Compaction"; the safety of it for every other
-- transaction is in src/compact.rs).
--
-- While a transaction elsewhere holds the xmin horizon (an idle `BEGIN`, a report, a replication
-- slot catching up), every version a job leaves in jobq.live_jobs and jobq.ready (and a keyed
-- job's attempt in jobq.slots) stays, vacuum cannot remove it, and the tables grow by every job
-- that runs. TRUNCATE removes a table's rows whatever snapshot is held. So once these hot
-- tables hold `min_dead` dead versions and four times as many as live rows, while something has
-- held the horizon for more than 10 s, jobq._compact, under an ACCESS EXCLUSIVE lock on the
-- three, copies their live rows out, truncates them and writes the rows back, unchanged (ids,
-- states, keys, slots, claim order): the tables are then the size of the work in flight again.
-- jobq.slots goes with the other two because every reader of it has locked jobq.ready or
-- jobq.live_jobs first in the same transaction (checkout, completion, fail, cancel, the
-- reaper's returns), so whatever holds off a compaction of those holds off one of it too.
--
-- What it costs and when it does not run:
-- - Every call of jobq's functions on these tables waits while it runs: for as long as copying
--   the live rows takes (measured: docs/performance.md, "Under a long transaction elsewhere"). So it does not
--   run with more than 100,000 live rows.
-- - It never waits long for its locks (`lock_wait` for the three together, 50 ms unless the
--   background worker's last tries missed them, and never more than half of deadlock_timeout;
--   the background worker tries again after 1 s, 2 s, 4 s … up to a minute, each time waiting
--   twice as long), and does not try
--   while a transaction that started more than a second ago (or a prepared one) holds a lock on
--   any of them (a REPEATABLE READ reader of them): TRUNCATE cannot run before it ends. Nor
--   while pg_dump is connected (jobq._dump_connected).
-- - Rows visible to a snapshot taken before the truncation are not visible to it afterwards
--   (TRUNCATE is not MVCC-safe): jobq's functions guard against it (jobq._hold_hot_tables), but a
--   REPEATABLE READ transaction of a client that reads jobq.jobs, jobq.live_jobs or
--   jobq.concurrency_slots directly sees no live job (no slot in use) after a compaction
--   committed since its snapshot.
-- min_dead = 0 compacts now, whatever the tables hold (tests, an operator).
-- pg_dump takes its snapshot first and locks the tables it dumps after: a compaction
-- committed in between would leave the queue's live jobs and their slots out of the dump (and
-- keep their unique keys, jobq.locks, in it). It names itself (application_name 'pg_dump', and
-- pg_dumpall's 'pg_dumpall') unless told otherwise. Reads the sessions anew, not this
-- transaction's copy.
CREATE FUNCTION jobq._dump_connected() RETURNS boolean
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, pg_temp AS $$
BEGIN
    PERFORM pg_stat_clear_snapshot();
    RETURN EXISTS (SELECT 1 FROM pg_stat_activity a
                    WHERE a.datname = current_database() AND a.application_name LIKE 'pg\_dump%');
END $$;

-- True: compacted. False: nothing to do (or not now: a condition above). NULL: its lock was
-- not granted within `lock_wait`.
CREATE FUNCTION jobq._compact(min_dead bigint, lock_wait interval DEFAULT '50 ms') RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_live     jobq.live_jobs[];
    v_ready    jobq.ready[];
    v_slots    jobq.slots[];
    v_dead     bigint;
    v_rows     bigint;
    v_before   bigint;
    v_start    timestamptz;
    v_until    timestamptz;
    v_table    regclass;
    -- The hot tables, in the order they are locked (checkout's).
    v_tables   regclass[] := ARRAY['jobq.ready'::regclass, 'jobq.live_jobs'::regclass, 'jobq.slots'::regclass];
BEGIN
    -- Its copy must see every row committed before it got its lock: a statement's snapshot
    -- taken after the LOCK, which only READ COMMITTED gives (a transaction snapshot taken
    -- before it would miss rows, and the TRUNCATE would lose them).
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'jobq: compaction needs READ COMMITTED' USING ERRCODE = '0A000';
    END IF;
    IF min_dead > 0 THEN
        SELECT sum(pg_stat_get_dead_tuples(t)), sum(pg_stat_get_live_tuples(t)) INTO v_dead, v_rows
          FROM unnest(v_tables) t;
        IF v_dead < greatest(min_dead, 4 * v_rows) OR v_rows > 100000 THEN
            RETURN false;
        END IF;
        -- Only where vacuum cannot do it: something has held the xmin horizon for more than
        -- 10 s (a replication slot or a prepared transaction for any time). Without that, the
        -- dead versions are autovacuum's, however many pile up between its visits.
        IF NOT EXISTS (SELECT 1 FROM jobq._oldest_horizon() h
                        WHERE h.xact_age IS NULL OR h.xact_age > interval '10 seconds') THEN
            RETURN false;
        END IF;
        -- A prepared transaction's locks have no pid: they count as old.
        IF EXISTS (SELECT 1 FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
                    WHERE l.locktype = 'relation' AND l.granted
                      AND l.database = (SELECT d.oid FROM pg_database d WHERE d.datname = current_database())
                      AND l.relation = ANY (v_tables::oid[])
                      AND l.pid IS DISTINCT FROM pg_backend_pid()
                      AND (l.pid IS NULL OR a.xact_start < clock_timestamp() - interval '1 second')) THEN
            RETURN false;
        END IF;
        IF jobq._dump_connected() THEN
            RETURN false;
        END IF;
    END IF;
    -- In checkout's order (jobq.ready, jobq.live_jobs, then jobq.slots), and never waiting as
    -- long as the deadlock detector would: every call that comes meanwhile queues behind this
    -- request, and one that waited deadlock_timeout would run the detector and could be picked.
    -- One budget for the three (lock_timeout counts each wait on its own): each table gets
    -- what the ones before it left. A lock not granted in time is NULL, tried again later.
    v_until := clock_timestamp() + least(coalesce(lock_wait, interval '50 ms'),
                                         current_setting('deadlock_timeout')::interval / 2);
    BEGIN
        FOREACH v_table IN ARRAY v_tables LOOP
            PERFORM set_config('lock_timeout',
                greatest(1, extract(epoch FROM v_until - clock_timestamp()) * 1000)::integer || 'ms', true);
            EXECUTE format('LOCK TABLE %s IN ACCESS EXCLUSIVE MODE', v_table);
        END LOOP;
    EXCEPTION WHEN lock_not_available THEN
        RETURN NULL;
    END;
    -- Once more under the lock: a pg_dump that connected since the look above may have taken
    -- its snapshot already (a narrow window remains: one that connects from here to the commit).
    IF min_dead > 0 AND jobq._dump_connected() THEN
        RETURN false;
    END IF;
    v_start := clock_timestamp();
    -- Before the truncation, under the lock: whoever locks the tables next reads it.
    IF NOT jobq._note_compaction() THEN
        RAISE EXCEPTION 'jobq: compaction needs jobq in shared_preload_libraries'
            USING ERRCODE = '55000';
    END IF;
    v_before := (SELECT sum(pg_total_relation_size(t)) FROM unnest(v_tables) t);
    SELECT array_agg(j) INTO v_live FROM jobq.live_jobs j;
    SELECT array_agg(r) INTO v_ready FROM jobq.ready r;
    SELECT array_agg(s) INTO v_slots FROM jobq.slots s;
    TRUNCATE jobq.live_jobs, jobq.ready, jobq.slots;
    INSERT INTO jobq.live_jobs SELECT * FROM unnest(v_live);
    INSERT INTO jobq.slots SELECT * FROM unnest(v_slots);
    -- ready's stored queue_hash is computed again, not copied.
    INSERT INTO jobq.ready (queue, priority, run_at, id, kind, keyed, concurrency_key,
                            concurrency_limit, while_key, rate_key)
    SELECT r.queue, r.priority, r.run_at, r.id, r.kind, r.keyed, r.concurrency_key,
           r.concurrency_limit, r.while_key, r.rate_key
      FROM unnest(v_ready) r;
    RAISE LOG 'jobq: compacted the hot tables in % ms: % jobs kept, % MB before, % MB after',
        round(extract(epoch FROM clock_timestamp() - v_start) * 1000, 1),
        coalesce(array_length(v_live, 1), 0), round(v_before / 1048576.0, 1),
        round((SELECT sum(pg_total_relation_size(t)) FROM unnest(v_tables) t) / 1048576.0, 1);
    RETURN true;
END $$;

-- The background worker's call, after each reap pass, in a transaction of its own: a failure is
-- logged and never stops the reaper.
-- 1: compacted; 0: nothing to do; -1: it could not (its lock not granted in time, or an
-- error): the background worker then waits longer before the next try (src/bgworker.rs).
-- `missed`: how many tries in a row could not. Each waits twice as long for the locks as the
-- one before (50 ms, 100 ms, 200 ms …, at most half of deadlock_timeout): where the tables'
-- other transactions take longer than 50 ms (a bulk enqueue of thousands of jobs, or checkouts
-- already slowed by the dead versions a compaction would remove), a fixed 50 ms may never be
-- granted, and the tables would grow while the horizon is held.
CREATE FUNCTION jobq._compact_pass(missed integer DEFAULT 0) RETURNS integer
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_after bigint := jobq.compact_after();
    v_done  boolean;
BEGIN
    IF v_after <= 0 THEN
        RETURN 0;
    END IF;
    v_done := jobq._compact(v_after, interval '50 ms' * power(2, least(coalesce(missed, 0), 10)));
    RETURN CASE WHEN v_done THEN 1 WHEN NOT v_done THEN 0 ELSE -1 END;
EXCEPTION WHEN OTHERS THEN
    RAISE WARNING 'jobq reaper: compaction failed: % (SQLSTATE %)', SQLERRM, SQLSTATE;
    RETURN -1;
END $$;

-- ---- src/sql/workflows.sql ----
-- Workflows and durable jobs: dependencies (jobq_enqueue's depends_on), suspensions
-- (jobq_snooze, jobq_await_jobs, jobq_await_event), events (jobq_emit_event, jobq.events),
-- checkpoints (jobq_checkpoint) and outcomes (jobq_results).
--
-- One mechanism serves dependencies, awaited jobs and awaited events: a job in state
-- 'blocked' has no ready row (checkout never sees it) and one row in jobq.blocked saying what
-- it waits for. Whoever satisfies it deletes that row and makes the job ready, in the same
-- transaction (jobq._unblock); a row can be deleted once, so the job leaves 'blocked' once.

-- What a blocked job waits for: `waiting` unfinished jobs (the unsettled edges below that
-- name it as child), or the event `event` until `until`.
CREATE TABLE jobq.blocked (
    job_id     bigint PRIMARY KEY,
    waiting    integer NOT NULL,
    event      text,
    until      timestamptz,
    -- Suspended by its own handler (an await): due at once when it wakes. A dependent job
    -- that was never started keeps the run_at it was enqueued with.
    suspended  boolean NOT NULL
);
CREATE INDEX blocked_by_event ON jobq.blocked (event) WHERE event IS NOT NULL;
CREATE INDEX blocked_until ON jobq.blocked (until) WHERE until IS NOT NULL;

-- Job `child` depends on (depends_on) or awaits (jobq_await_jobs) job `parent`. Kept until
-- the child is pruned: a finished parent is not pruned while an edge names an unfinished
-- child, and jobq_retry of a parent finds the children its failure cancelled.
CREATE TABLE jobq.edges (
    parent    bigint NOT NULL,
    child     bigint NOT NULL,
    cancel    boolean NOT NULL,               -- on_parent_failure 'cancel'
    settled   boolean NOT NULL,               -- the parent finished and the child was told
    cascaded  boolean NOT NULL DEFAULT false, -- the parent's failure cancelled the child
    PRIMARY KEY (parent, child)
);
CREATE INDEX edges_by_child ON jobq.edges (child);
CREATE INDEX edges_unsettled ON jobq.edges (parent) WHERE NOT settled;

-- Whatever inserts edges notes its database in shared memory before it commits, so that a
-- completion in a database that never wrote one skips looking (src/edges.rs). ALWAYS: also
-- when rows arrive by logical replication.
CREATE FUNCTION jobq._edges_written() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, pg_temp AS $$
BEGIN
    PERFORM jobq._note_edges();
    RETURN NULL;
END $$;
CREATE TRIGGER edges_written AFTER INSERT ON jobq.edges
    FOR EACH STATEMENT EXECUTE FUNCTION jobq._edges_written();
ALTER TABLE jobq.edges ENABLE ALWAYS TRIGGER edges_written;

-- Events by name. A row with emitted_at NULL is an await's placeholder: jobq_await_event and
-- jobq_emit_event both write the name's row (INSERT ... ON CONFLICT DO UPDATE), so the two
-- are ordered by its row lock in every isolation level and no wake-up falls between them.
CREATE TABLE jobq.event_log (
    name        text PRIMARY KEY,
    payload     jsonb,
    emitted_at  timestamptz,
    awaited_at  timestamptz
);
CREATE INDEX event_log_emitted ON jobq.event_log (emitted_at) WHERE emitted_at IS NOT NULL;

CREATE VIEW jobq.events AS
SELECT e.name, e.payload, e.emitted_at FROM jobq.event_log e WHERE e.emitted_at IS NOT NULL;

-- Makes blocked job `job` ready, its jobq.blocked row already deleted by the caller (which
-- is what makes this happen once). A suspended job is due now; a dependent one at its run_at.
CREATE FUNCTION jobq._unblock(job bigint, suspended boolean) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    j record;
BEGIN
    UPDATE jobq.live_jobs x
       SET state = 'ready', run_at = CASE WHEN suspended THEN clock_timestamp() ELSE x.run_at END
     WHERE x.id = job AND x.state = 'blocked'
    RETURNING x.queue, x.run_at INTO j;
    IF FOUND THEN
        PERFORM jobq._enter_ready(ARRAY[job]);
        IF j.run_at <= clock_timestamp() THEN
            PERFORM jobq._notify(j.queue);
        END IF;
    END IF;
END $$;

-- Cancels blocked job `job` whose parent `parent` ended `parent_state` (on_parent_failure
-- 'cancel'); its own dependents learn it through jobq._archive.
CREATE FUNCTION jobq._cancel_blocked(job bigint, parent bigint, parent_state text) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    j record;
BEGIN
    DELETE FROM jobq.blocked b WHERE b.job_id = job;
    IF NOT FOUND THEN
        RETURN;  -- no longer blocked: cancelled or woken by someone else first
    END IF;
    UPDATE jobq.live_jobs x
       SET state = 'cancelled', finished_at = clock_timestamp(),
           last_error = jsonb_build_object('parent', parent, 'parent_state', parent_state)
     WHERE x.id = job AND x.state = 'blocked'
    RETURNING x.queue, x.unique_key, x.unique_strategy, x.concurrency_key INTO j;
    IF FOUND THEN
        UPDATE jobq.edges e SET cascaded = true WHERE e.parent = _cancel_blocked.parent AND e.child = job;
        PERFORM jobq._archive(ARRAY[job]);
        PERFORM jobq._release_keys(job, j.queue, 'cancelled', j.unique_key, j.unique_strategy,
                                   j.concurrency_key, NULL);
    END IF;
END $$;

-- Jobs `parents` finished, as `states` (completed, dead, cancelled): each job that depends on
-- or awaits one of them counts it as finished (a decrement of its jobq.blocked row, which
-- orders concurrent finishers), becomes ready when it was the last, or is cancelled when a
-- parent failed and its on_parent_failure is 'cancel'. Called by every path that finishes a
-- job (jobq._archive, jobq._complete, src/complete.rs), so it costs a job without dependents
-- one index probe. Children in id order, so two finishers never lock them in opposite orders.
CREATE FUNCTION jobq._settle(parents bigint[], states text[]) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    e       record;
    b       record;
BEGIN
    IF parents IS NULL THEN
        RETURN;
    END IF;
    -- 40001 under REPEATABLE READ or SERIALIZABLE for an edge this snapshot cannot see.
    PERFORM jobq._refuse_unseen_edges(parents);
    IF NOT EXISTS (SELECT 1 FROM jobq.edges x WHERE x.parent = ANY (parents) AND NOT x.settled) THEN
        RETURN;
    END IF;
    FOR e IN
        WITH s AS (
            UPDATE jobq.edges x SET settled = true
              FROM unnest(parents, states) AS p(id, state)
             WHERE x.parent = p.id AND NOT x.settled
            RETURNING x.parent, x.child, x.cancel, p.state
        )
        SELECT * FROM s ORDER BY s.child, s.parent
    LOOP
        IF e.cancel AND e.state <> 'completed' THEN
            PERFORM jobq._cancel_blocked(e.child, e.parent, e.state);
        ELSE
            UPDATE jobq.blocked x SET waiting = x.waiting - 1
             WHERE x.job_id = e.child
            RETURNING x.waiting, x.event, x.suspended INTO b;
            IF FOUND AND b.waiting <= 0 AND b.event IS NULL THEN
                DELETE FROM jobq.blocked x WHERE x.job_id = e.child;
                PERFORM jobq._unblock(e.child, b.suspended);
            END IF;
        END IF;
    END LOOP;
END $$;

-- Batch calls (jobq_complete_many, jobq_fail_many, and the fused calls through them) finish
-- several jobs, each telling its dependents in child order. Two of them telling the same
-- children in crossing orders (a parent of the second child only, then one of the first;
-- against a parent of both) would each hold one child's jobq.blocked row and wait for the
-- other's. So a batch locks the blocked rows of all its jobs' waiting children first, in child
-- order, as one jobq._settle does.
CREATE FUNCTION jobq._lock_children(job_ids bigint[]) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, pg_temp AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM jobq.edges e WHERE e.parent = ANY (job_ids) AND NOT e.settled) THEN
        -- The hot tables in their one lock order before any row (src/compact.rs).
        PERFORM jobq._hold_hot_tables();
        PERFORM 1 FROM jobq.blocked b
          WHERE b.job_id IN (SELECT e.child FROM jobq.edges e WHERE e.parent = ANY (job_ids) AND NOT e.settled)
          ORDER BY b.job_id
            FOR UPDATE;
    END IF;
END $$;

-- The jobs of `ids` (distinct, at most `most`, each existing, else 22023) that are not
-- finished, locked FOR KEY SHARE: compatible with their claim and checkpoints, not with their
-- finishing, which waits for this transaction and then sees the edges it wrote. Ids not in
-- the answer were finished when looked at (a statement later, in a new snapshot).
CREATE FUNCTION jobq._lock_unfinished(ids bigint[], what text, most integer) RETURNS bigint[]
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_ids   bigint[] := ARRAY(SELECT DISTINCT i FROM unnest(ids) i ORDER BY i);
    v_live  bigint[];
    v_known integer;
BEGIN
    IF array_position(v_ids, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'jobq: % must not contain NULL', what USING ERRCODE = '22023';
    ELSIF cardinality(v_ids) > most THEN
        RAISE EXCEPTION 'jobq: % names % jobs, at most % allowed', what, cardinality(v_ids), most
            USING ERRCODE = '22023';
    END IF;
    v_live := ARRAY(SELECT x.id FROM jobq.live_jobs x WHERE x.id = ANY (v_ids) ORDER BY x.id FOR KEY SHARE);
    SELECT count(*) INTO v_known FROM jobq.finished_jobs f WHERE f.id = ANY (v_ids) AND f.id <> ALL (v_live);
    IF v_known + cardinality(v_live) < cardinality(v_ids) THEN
        RAISE EXCEPTION 'jobq: % names jobs that do not exist or were pruned: %', what,
            ARRAY(SELECT i FROM unnest(v_ids) i
                   WHERE NOT EXISTS (SELECT 1 FROM jobq.jobs j WHERE j.id = i) LIMIT 10)
            USING ERRCODE = '22023';
    END IF;
    RETURN v_live;
END $$;

-- jobq_enqueue's depends_on: the state job `job` starts in ('blocked', 'ready' or
-- 'cancelled'), its edges written. Called before the job row exists (its id drawn).
CREATE FUNCTION jobq._depend(job bigint, depends_on bigint[], on_parent_failure text) RETURNS text
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_live    bigint[];
    v_cancel  boolean := on_parent_failure = 'cancel';
    v_failed  boolean;
BEGIN
    -- The hot tables in their one lock order before a parent's row is locked (src/compact.rs).
    PERFORM jobq._hold_hot_tables();
    v_live := jobq._lock_unfinished(_depend.depends_on, 'depends_on', 1000);
    SELECT coalesce(bool_or(f.state <> 'completed'), false) INTO v_failed
      FROM jobq.finished_jobs f WHERE f.id = ANY (_depend.depends_on) AND f.id <> ALL (v_live);
    INSERT INTO jobq.edges (parent, child, cancel, settled, cascaded)
    SELECT DISTINCT p, job, v_cancel, p <> ALL (v_live),
           v_cancel AND EXISTS (SELECT 1 FROM jobq.finished_jobs f WHERE f.id = p AND f.state <> 'completed')
      FROM unnest(_depend.depends_on) p;
    IF v_cancel AND v_failed THEN
        RETURN 'cancelled';
    ELSIF cardinality(v_live) = 0 THEN
        RETURN 'ready';
    END IF;
    INSERT INTO jobq.blocked (job_id, waiting, suspended) VALUES (job, cardinality(v_live), false);
    RETURN 'blocked';
END $$;

-- jobq_retry of `job`: the children its failure cancelled are blocked again (their unique
-- key taken back; one taken meanwhile leaves the child cancelled), waiting for their parents
-- not finished now, and so on down the graph.
CREATE FUNCTION jobq._reblock(job bigint) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    c record;
    n integer;
BEGIN
    FOR c IN
        SELECT f.id, f.unique_key, f.unique_strategy
          FROM jobq.edges e JOIN jobq.finished_jobs f ON f.id = e.child
         WHERE e.parent = job AND e.cascaded AND f.state = 'cancelled'
         ORDER BY f.id
           FOR UPDATE OF f
    LOOP
        IF c.unique_key IS NOT NULL AND c.unique_strategy <> 'while_executing'
           AND NOT jobq._take_key(c.unique_key, c.id) THEN
            CONTINUE;
        END IF;
        WITH moved AS (
            DELETE FROM jobq.finished_jobs x WHERE x.id = c.id RETURNING x.*
        )
        INSERT INTO jobq.live_jobs SELECT * FROM moved;
        UPDATE jobq.live_jobs x SET state = 'blocked', finished_at = NULL, last_error = NULL
         WHERE x.id = c.id;
        UPDATE jobq.edges e SET settled = false, cascaded = false
         WHERE e.child = c.id AND EXISTS (SELECT 1 FROM jobq.live_jobs p WHERE p.id = e.parent);
        SELECT count(*) INTO n FROM jobq.edges e WHERE e.child = c.id AND NOT e.settled;
        INSERT INTO jobq.blocked (job_id, waiting, suspended) VALUES (c.id, n, false);
        PERFORM jobq._reblock(c.id);
    END LOOP;
END $$;

-- The fence of the awaits, before they change anything: locks job `job`'s row when it is
-- executing under `worker`, a worker the caller may act for, and says so; otherwise false, or
-- 42501 for another role's worker, as jobq_complete.
CREATE FUNCTION jobq._lock_executing(job bigint, worker uuid) RETURNS boolean
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, pg_temp AS $$
BEGIN
    PERFORM 1 FROM jobq.live_jobs x
      WHERE x.id = job AND (CASE WHEN x.state = 'executing' THEN x.worker_id END) = worker
        AND EXISTS (SELECT 1 FROM jobq.workers w WHERE w.id = worker AND jobq._may_act_for(w.owner))
        FOR NO KEY UPDATE OF x;
    IF FOUND THEN
        RETURN true;
    END IF;
    PERFORM jobq._refuse_foreign_worker(worker);
    RETURN false;
END $$;

-- The suspension of job `job`, executing under `worker`: the job goes to `to_state`
-- ('ready' due at `due`, or 'blocked'), gives back its slots and while_executing key (its
-- other keys as for a waiting job), and its attempt does not count. A job whose cancellation
-- was requested is cancelled instead. False, changing nothing, when the job is not executing
-- under this worker (42501 for another role's worker), as jobq_complete.
CREATE FUNCTION jobq._suspend(job bigint, worker uuid, to_state text, due timestamptz) RETURNS text
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    j record;
BEGIN
    PERFORM jobq._hold_hot_tables();
    UPDATE jobq.live_jobs x
       SET state = CASE WHEN x.cancel_requested_at IS NOT NULL THEN 'cancelled' ELSE to_state END,
           attempt = x.attempt - 1,
           run_at = coalesce(due, x.run_at),
           finished_at = CASE WHEN x.cancel_requested_at IS NOT NULL THEN clock_timestamp() END
     WHERE x.id = job AND (CASE WHEN x.state = 'executing' THEN x.worker_id END) = worker
       AND EXISTS (SELECT 1 FROM jobq.workers w WHERE w.id = worker AND jobq._may_act_for(w.owner))
    RETURNING x.state, x.queue, x.run_at, x.unique_key, x.unique_strategy, x.concurrency_key,
              x.concurrency_slot INTO j;
    IF NOT FOUND THEN
        PERFORM jobq._refuse_foreign_worker(worker);
        RETURN NULL;
    END IF;
    PERFORM jobq._release_keys(job, j.queue, CASE WHEN j.state = 'cancelled' THEN 'cancelled' ELSE 'ready' END,
                               j.unique_key, j.unique_strategy, j.concurrency_key, j.concurrency_slot);
    IF j.state = 'cancelled' THEN
        PERFORM jobq._archive(ARRAY[job]);
    ELSIF j.state = 'ready' THEN
        PERFORM jobq._enter_ready(ARRAY[job]);
        IF j.run_at <= clock_timestamp() THEN
            PERFORM jobq._notify(j.queue);
        END IF;
    END IF;
    RETURN j.state;
END $$;

CREATE FUNCTION jobq_snooze(job_id bigint, worker uuid, until timestamptz) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, jobq, pg_temp AS $$
BEGIN
    IF job_id IS NULL OR worker IS NULL OR until IS NULL THEN
        RAISE EXCEPTION 'jobq: job_id, worker and until must not be NULL' USING ERRCODE = '22004';
    ELSIF NOT isfinite(until) THEN
        RAISE EXCEPTION 'jobq: until must be a finite time, got %', until USING ERRCODE = '22023';
    END IF;
    RETURN jobq._suspend(job_id, worker, 'ready', until) IS NOT NULL;
END $$;

CREATE FUNCTION jobq_await_jobs(job_id bigint, worker uuid, jobs bigint[]) RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_live  bigint[];
BEGIN
    IF job_id IS NULL OR worker IS NULL OR jobs IS NULL THEN
        RAISE EXCEPTION 'jobq: job_id, worker and jobs must not be NULL' USING ERRCODE = '22004';
    ELSIF job_id = ANY (jobs) THEN
        RAISE EXCEPTION 'jobq: job % cannot await itself', job_id USING ERRCODE = '22023';
    END IF;
    -- A compaction of the hot tables in progress is waited for (src/compact.rs).
    PERFORM jobq._hold_hot_tables();
    -- The fence first, without changing anything: NULL for a job not executing under worker.
    IF NOT jobq._lock_executing(job_id, worker) THEN
        RETURN NULL;
    END IF;
    v_live := jobq._lock_unfinished(jobs, 'jobs', 10000);
    -- Every awaited job gets an edge (a finished one keeps it from pruning while this job
    -- may still read its result); the unfinished ones are what the job waits for.
    INSERT INTO jobq.edges AS e (parent, child, cancel, settled)
    SELECT DISTINCT a.id, job_id, false, l.id IS NULL
      FROM unnest(jobs) AS a(id) LEFT JOIN unnest(v_live) AS l(id) ON l.id = a.id
    ON CONFLICT (parent, child) DO UPDATE SET settled = excluded.settled, cancel = false;
    IF cardinality(v_live) = 0 THEN
        RETURN 'finished';
    END IF;
    IF jobq._suspend(job_id, worker, 'blocked', NULL) = 'blocked' THEN
        INSERT INTO jobq.blocked (job_id, waiting, suspended) VALUES (job_id, cardinality(v_live), true);
    END IF;
    RETURN 'waiting';
END $$;

-- An awaited event's checkpoint: `event:<name>` = {"payload": …, "emitted_at": …}.
CREATE FUNCTION jobq._event_checkpoint(job bigint, name text, payload jsonb, emitted_at timestamptz) RETURNS void
LANGUAGE sql SET search_path = pg_catalog, jobq, pg_temp AS $$
    UPDATE jobq.live_jobs x
       SET checkpoints = x.checkpoints || jsonb_build_object('event:' || _event_checkpoint.name,
                             jsonb_build_object('payload', _event_checkpoint.payload,
                                                'emitted_at', _event_checkpoint.emitted_at))
     WHERE x.id = _event_checkpoint.job
$$;

CREATE FUNCTION jobq_await_event(job_id bigint, worker uuid, event text, timeout interval DEFAULT NULL)
RETURNS text LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    e record;
BEGIN
    IF job_id IS NULL OR worker IS NULL OR event IS NULL THEN
        RAISE EXCEPTION 'jobq: job_id, worker and event must not be NULL' USING ERRCODE = '22004';
    ELSIF event = '' OR octet_length(event) > 1000 THEN
        RAISE EXCEPTION 'jobq: event must be non-empty and at most 1000 bytes' USING ERRCODE = '22023';
    ELSIF timeout < interval '0' OR timeout > interval '100000 years' THEN
        RAISE EXCEPTION 'jobq: timeout must be between 0 and 100000 years, got %', timeout USING ERRCODE = '22023';
    END IF;
    PERFORM jobq._hold_hot_tables();  -- src/compact.rs
    IF NOT jobq._lock_executing(job_id, worker) THEN
        RETURN NULL;
    END IF;
    -- The event's row, written either way (jobq.event_log): an emit in progress is waited
    -- for and then seen.
    INSERT INTO jobq.event_log AS l (name, awaited_at) VALUES (event, clock_timestamp())
    ON CONFLICT (name) DO UPDATE SET awaited_at = excluded.awaited_at
    RETURNING l.payload, l.emitted_at INTO e;
    IF e.emitted_at IS NOT NULL THEN
        PERFORM jobq._event_checkpoint(job_id, event, e.payload, e.emitted_at);
        RETURN 'emitted';
    END IF;
    IF jobq._suspend(job_id, worker, 'blocked', NULL) = 'blocked' THEN
        INSERT INTO jobq.blocked (job_id, waiting, event, until, suspended)
        VALUES (job_id, 0, event, clock_timestamp() + timeout, true);
    END IF;
    RETURN 'waiting';
END $$;

CREATE FUNCTION jobq_emit_event(name text, payload jsonb DEFAULT NULL) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_at  timestamptz := clock_timestamp();
    n     integer := 0;
    b     record;
BEGIN
    IF name IS NULL THEN
        RAISE EXCEPTION 'jobq: name must not be NULL' USING ERRCODE = '22004';
    ELSIF name = '' OR octet_length(name) > 1000 THEN
        RAISE EXCEPTION 'jobq: name must be non-empty and at most 1000 bytes' USING ERRCODE = '22023';
    END IF;
    PERFORM jobq._hold_hot_tables();  -- src/compact.rs
    -- The first emit wins: a name already emitted changes nothing.
    INSERT INTO jobq.event_log AS l (name, payload, emitted_at) VALUES (name, payload, v_at)
    ON CONFLICT ON CONSTRAINT event_log_pkey DO UPDATE SET payload = excluded.payload, emitted_at = excluded.emitted_at
     WHERE l.emitted_at IS NULL;
    IF NOT FOUND THEN
        RETURN 0;
    END IF;
    FOR b IN
        DELETE FROM jobq.blocked x
         WHERE x.job_id = ANY (ARRAY(SELECT y.job_id FROM jobq.blocked y
                                      WHERE y.event = jobq_emit_event.name ORDER BY y.job_id))
           AND x.event = jobq_emit_event.name
        RETURNING x.job_id
    LOOP
        PERFORM jobq._event_checkpoint(b.job_id, name, payload, v_at);
        PERFORM jobq._unblock(b.job_id, true);
        n := n + 1;
    END LOOP;
    RETURN n;
END $$;

CREATE FUNCTION jobq_checkpoint(job_id bigint, worker uuid, step text, value jsonb) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_steps jsonb;
BEGIN
    IF job_id IS NULL OR worker IS NULL OR step IS NULL THEN
        RAISE EXCEPTION 'jobq: job_id, worker and step must not be NULL' USING ERRCODE = '22004';
    ELSIF step = '' OR octet_length(step) > 1000 THEN
        RAISE EXCEPTION 'jobq: step must be non-empty and at most 1000 bytes' USING ERRCODE = '22023';
    END IF;
    PERFORM jobq._hold_hot_tables();  -- src/compact.rs
    UPDATE jobq.live_jobs x
       SET checkpoints = x.checkpoints || jsonb_build_object(step, coalesce(value, 'null'::jsonb))
     WHERE x.id = job_id AND (CASE WHEN x.state = 'executing' THEN x.worker_id END) = worker
       AND EXISTS (SELECT 1 FROM jobq.workers w WHERE w.id = worker AND jobq._may_act_for(w.owner))
    RETURNING x.checkpoints INTO v_steps;
    IF NOT FOUND THEN
        PERFORM jobq._refuse_foreign_worker(worker);
        RETURN false;
    END IF;
    IF (SELECT count(*) FROM jsonb_object_keys(v_steps)) > 1000 THEN
        RAISE EXCEPTION 'jobq: job % would hold more than 1000 checkpoints', job_id USING ERRCODE = '22023';
    END IF;
    RETURN true;
END $$;

CREATE FUNCTION jobq_results(ids bigint[])
RETURNS TABLE (id bigint, kind text, state text, attempt integer, result jsonb, last_error jsonb)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, jobq, pg_temp AS $$
BEGIN
    IF ids IS NULL THEN
        RAISE EXCEPTION 'jobq: ids must not be NULL' USING ERRCODE = '22004';
    ELSIF cardinality(ids) > 10000 THEN
        RAISE EXCEPTION 'jobq: ids names % jobs, at most 10000 allowed', cardinality(ids) USING ERRCODE = '22023';
    END IF;
    RETURN QUERY
    SELECT j.id, j.kind, j.state, j.attempt, j.result, j.last_error
      FROM jobq.jobs j
     WHERE j.id = ANY (ids)
     ORDER BY array_position(ids, j.id);
END $$;

-- A value of a graph element (jobq_enqueue_graph): `key` of `job` read as `type`, NULL when
-- absent; 22023 naming the element and key when it does not read as one.
CREATE FUNCTION jobq._graph_value(job jsonb, key text, type text, pos integer) RETURNS text
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v text := job ->> key;
BEGIN
    IF v IS NOT NULL THEN
        EXECUTE format('SELECT %L::%s', v, type);
    END IF;
    RETURN v;
EXCEPTION WHEN data_exception THEN
    RAISE EXCEPTION 'jobq: jobs[%].% is not a %: %', pos, key, type, v USING ERRCODE = '22023';
END $$;

-- A whole graph of jobs in one call and one transaction (an addition to the contract): `jobs` is a JSON array
-- of objects, each with jobq_enqueue's arguments by name ("queue" required) and "after", the
-- 0-based positions of earlier elements it depends on (with its "depends_on" ids of existing
-- jobs, if any). Elements are enqueued in order, so a graph is acyclic by construction.
-- Returns the ids in array order; NULL where a unique key's conflict discarded the job (an
-- element after it is refused).
CREATE FUNCTION jobq_enqueue_graph(jobs jsonb) RETURNS SETOF bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_keys    text[] := ARRAY['queue', 'payload', 'kind', 'priority', 'run_at', 'max_attempts', 'unique_key',
                              'unique_strategy', 'on_conflict', 'concurrency_key', 'concurrency_limit',
                              'rate_key', 'depends_on', 'on_parent_failure', 'after'];
    v_ids     bigint[] := '{}';
    v_parents bigint[];
    v_bad     text;
    j         jsonb;
    i         integer := 0;
    a         integer;
BEGIN
    IF jobs IS NULL THEN
        RAISE EXCEPTION 'jobq: jobs must not be NULL' USING ERRCODE = '22004';
    ELSIF jsonb_typeof(jobs) <> 'array' THEN
        RAISE EXCEPTION 'jobq: jobs must be a JSON array of job objects' USING ERRCODE = '22023';
    ELSIF jsonb_array_length(jobs) > 10000 THEN
        RAISE EXCEPTION 'jobq: jobs holds % jobs, at most 10000 allowed', jsonb_array_length(jobs) USING ERRCODE = '22023';
    END IF;
    FOR j IN SELECT e FROM jsonb_array_elements(jobs) e LOOP
        IF jsonb_typeof(j) <> 'object' THEN
            RAISE EXCEPTION 'jobq: jobs[%] is not a JSON object', i USING ERRCODE = '22023';
        END IF;
        SELECT string_agg(k, ', ') INTO v_bad FROM jsonb_object_keys(j) k WHERE k <> ALL (v_keys);
        IF v_bad IS NOT NULL THEN
            RAISE EXCEPTION 'jobq: jobs[%] has unknown keys: %', i, v_bad
                USING ERRCODE = '22023', HINT = 'Use the arguments of jobq_enqueue, and "after".';
        ELSIF jsonb_typeof(coalesce(j -> 'after', '[]')) <> 'array' OR jsonb_typeof(coalesce(j -> 'depends_on', '[]')) <> 'array' THEN
            RAISE EXCEPTION 'jobq: jobs[%]: "after" and "depends_on" must be JSON arrays', i USING ERRCODE = '22023';
        END IF;
        v_parents := ARRAY(SELECT jobq._graph_value(jsonb_build_object('id', d), 'id', 'bigint', i)::bigint
                             FROM jsonb_array_elements(coalesce(j -> 'depends_on', '[]')) d);
        FOR a IN SELECT jobq._graph_value(jsonb_build_object('after', x), 'after', 'integer', i)::integer
                   FROM jsonb_array_elements(coalesce(j -> 'after', '[]')) x LOOP
            IF a IS NULL OR a < 0 OR a >= i THEN
                RAISE EXCEPTION 'jobq: jobs[%].after names %: only an earlier element (0 to %) may be named', i, a, i - 1
                    USING ERRCODE = '22023';
            ELSIF v_ids[a + 1] IS NULL THEN
                RAISE EXCEPTION 'jobq: jobs[%].after names jobs[%], which was not enqueued (its unique key was taken)', i, a
                    USING ERRCODE = '22023';
            END IF;
            v_parents := v_parents || v_ids[a + 1];
        END LOOP;
        v_ids := v_ids || jobq._enqueue(
            j ->> 'queue',
            coalesce(j -> 'payload', '{}'),
            j ->> 'kind',
            coalesce(jobq._graph_value(j, 'priority', 'integer', i)::integer, 0),
            jobq._graph_value(j, 'run_at', 'timestamptz', i)::timestamptz,
            coalesce(jobq._graph_value(j, 'max_attempts', 'integer', i)::integer, 25),
            j ->> 'unique_key',
            coalesce(j ->> 'unique_strategy', 'until_executed'),
            coalesce(j ->> 'on_conflict', 'reject'),
            j ->> 'concurrency_key',
            coalesce(jobq._graph_value(j, 'concurrency_limit', 'integer', i)::integer, 1),
            j ->> 'rate_key',
            CASE WHEN cardinality(v_parents) > 0 THEN v_parents END,
            coalesce(j ->> 'on_parent_failure', 'cancel'));
        i := i + 1;
    END LOOP;
    RETURN QUERY SELECT u.id FROM unnest(v_ids) WITH ORDINALITY AS u(id, ord) ORDER BY u.ord;
END $$;

-- The reap pass's share (src/sql/reap.sql): awaits of events past their timeout wake up
-- (without the checkpoint); events past retention, and placeholders no job awaits any more,
-- are removed; in the SQL edition, the dependents that a completion under REPEATABLE READ
-- could not see are told (jobq._settle_unseen, src/edges.rs).
CREATE FUNCTION jobq._workflow_pass(now timestamptz, cutoff timestamptz) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    b record;
BEGIN
    FOR b IN
        DELETE FROM jobq.blocked x
         WHERE x.job_id = ANY (ARRAY(SELECT y.job_id FROM jobq.blocked y
                                      WHERE y.until <= now ORDER BY y.job_id FOR UPDATE SKIP LOCKED))
           AND x.until <= now
        RETURNING x.job_id
    LOOP
        PERFORM jobq._unblock(b.job_id, true);
    END LOOP;
    PERFORM jobq._settle_unseen();
    DELETE FROM jobq.event_log l
     WHERE (l.emitted_at < cutoff)
        OR (l.emitted_at IS NULL AND l.awaited_at < cutoff
            AND NOT EXISTS (SELECT 1 FROM jobq.blocked a WHERE a.event = l.name));
END $$;

-- ---- src/sql/privileges.sql ----
-- Privileges: who may call what (the contract, section Privileges). Runs last, once every object of
-- the extension exists.
--
-- PUBLIC gets nothing. Four NOLOGIN roles carry the rights, each including the one before:
-- jobq_reader < jobq_producer < jobq_worker < jobq_admin. An administrator grants them to
-- login roles (`GRANT jobq_worker TO app;`). Roles are cluster-wide: a second database, or a
-- CREATE EXTENSION after a DROP EXTENSION, finds them and reuses them.
-- Which worker a call may name is decided at run time by jobq._may_act_for
-- (src/privileges.rs): its own role's, or any for jobq_admin.

DO $$
DECLARE
    r text;
    v_prev text;
BEGIN
    -- Two databases running CREATE EXTENSION at once would both find a role missing and
    -- both create it; the loser would fail. Serialise the check-and-create across the
    -- cluster on the catalog of roles (CREATE ROLE's own lock conflicts with this one; logins
    -- only read it and do not wait). The SQL edition's installer is no superuser and may not
    -- lock that catalog: there a concurrent install may fail, and changes nothing.
    IF (SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = current_user) THEN
        LOCK TABLE pg_catalog.pg_authid IN SHARE ROW EXCLUSIVE MODE;
    END IF;
    FOREACH r IN ARRAY ARRAY['jobq_reader', 'jobq_producer', 'jobq_worker', 'jobq_admin'] LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = r) THEN
            EXECUTE format('CREATE ROLE %I NOLOGIN', r);
        END IF;
        IF v_prev IS NOT NULL AND NOT pg_catalog.pg_has_role(r, v_prev, 'MEMBER') THEN
            EXECUTE format('GRANT %I TO %I', v_prev, r);
        END IF;
        v_prev := r;
    END LOOP;
END $$;

-- Nothing for PUBLIC: not the jobq_* functions, not the internal helpers (PostgreSQL gives
-- PUBLIC EXECUTE on every new function), whichever schema they are in: the extension's
-- functions, or in the SQL edition (no extension) those of schema jobq and the jobq_* ones.
DO $$
DECLARE
    f regprocedure;
BEGIN
    FOR f IN
        SELECT d.objid::regprocedure FROM pg_catalog.pg_depend d
         WHERE d.classid = 'pg_catalog.pg_proc'::regclass AND d.deptype = 'e'
           AND d.refclassid = 'pg_catalog.pg_extension'::regclass
           AND d.refobjid = (SELECT e.oid FROM pg_catalog.pg_extension e WHERE e.extname = 'jobq')
        UNION
        SELECT p.oid::regprocedure FROM pg_catalog.pg_proc p
         WHERE NOT EXISTS (SELECT 1 FROM pg_catalog.pg_extension e WHERE e.extname = 'jobq')
           AND (p.pronamespace = 'jobq'::regnamespace
                OR (p.pronamespace = current_schema()::regnamespace AND p.proname LIKE 'jobq\_%'))
    LOOP
        EXECUTE format('REVOKE ALL ON FUNCTION %s FROM PUBLIC', f);
    END LOOP;
END $$;

GRANT USAGE ON SCHEMA jobq TO jobq_reader;

-- jobq_reader: the dashboards' tables and views.
GRANT SELECT ON jobq.queue_stats, jobq.jobs, jobq.workers, jobq.locks, jobq.schedules, jobq.events TO jobq_reader;
-- Workflows (src/sql/workflows.sql): what parents or awaited jobs produced, and what blocked
-- jobs wait for (the dashboard's job page).
GRANT EXECUTE ON FUNCTION jobq_results(bigint[]) TO jobq_reader;
-- Which release and edition runs here (src/sql/observe.sql).
GRANT EXECUTE ON FUNCTION jobq_version() TO jobq_reader;
GRANT SELECT ON jobq.blocked, jobq.edges TO jobq_reader;
-- The dashboard's views (src/sql/observe.sql), and the two read-only helpers jobq.health calls
-- (a view's functions run with the privileges of the role reading it).
GRANT SELECT ON jobq.concurrency_slots, jobq.rate_windows, jobq.table_stats, jobq.health TO jobq_reader;
-- Which queues and kinds are paused (the dashboard's /metrics says so, and the alert on a
-- backlog spares a queue paused on purpose).
GRANT SELECT ON jobq.pauses TO jobq_reader;
GRANT EXECUTE ON FUNCTION jobq._last_pass(), jobq._oldest_horizon() TO jobq_reader;
-- The per-minute counters (src/sql/counters.sql) and what reads them.
GRANT SELECT ON jobq.queue_minutes, jobq.queue_totals, jobq.queue_depths TO jobq_reader;
-- The two tables behind jobq.jobs (the same rows): a dashboard that looks for waiting or
-- executing jobs reads jobq.live_jobs and never walks the history.
GRANT SELECT ON jobq.live_jobs, jobq.finished_jobs TO jobq_reader;
GRANT EXECUTE ON FUNCTION jobq.throughput(timestamptz, interval), jobq.histogram_bounds(),
    jobq.histogram_quantile(bigint[], double precision), jobq.histogram_sum(bigint[]),
    jobq._histogram_add(bigint[], bigint[])
TO jobq_reader;

-- jobq_producer (and what jobq_reader may).
GRANT EXECUTE ON FUNCTION
    jobq_enqueue(text, jsonb, text, integer, timestamptz, integer, text, text, text, text, integer, text, bigint[], text),
    jobq_enqueue_batch(text, jsonb[], text, integer, timestamptz, integer),
    jobq_cancel(bigint),
    jobq_retry(bigint),
    jobq_emit_event(text, jsonb),
    jobq_enqueue_graph(jsonb)
TO jobq_producer;

-- jobq_worker (and what jobq_producer may: a worker enqueues follow-up jobs).
GRANT EXECUTE ON FUNCTION
    jobq_register_worker(text, jsonb, boolean),
    jobq._register_worker(uuid, text, jsonb, boolean),  -- the proxy's registration (jobq_proxy)
    jobq_heartbeat(uuid, bigint[]),
    jobq_unregister_worker(uuid),
    jobq_stop_checkouts(uuid),
    jobq_checkout(uuid, text[], integer, interval),
    jobq_complete(bigint, uuid, jsonb),
    jobq_fail(bigint, uuid, jsonb, interval, boolean),
    jobq_complete_many(uuid, bigint[], jsonb[]),
    jobq_fail_many(uuid, bigint[], jsonb[]),
    jobq_complete_and_checkout(uuid, bigint[], jsonb[], text[], integer),
    jobq_fail_and_checkout(uuid, bigint[], jsonb[], text[], integer),
    jobq_acquire_lock(text, uuid, interval),
    jobq_release_lock(text, uuid),
    jobq_lock_holder(text),
    jobq_checkpoint(bigint, uuid, text, jsonb),
    jobq_snooze(bigint, uuid, timestamptz),
    jobq_await_jobs(bigint, uuid, bigint[]),
    jobq_await_event(bigint, uuid, text, interval)
TO jobq_worker;

-- jobq_admin: everything (and any worker, jobq._may_act_for).
GRANT EXECUTE ON FUNCTION
    jobq_pause(text, text),
    jobq_resume(text, text),
    jobq_reap(),
    jobq_schedule(text, text, text, jsonb, text, integer, integer, text, boolean),
    jobq_unschedule(text),
    jobq_set_rate_limit(text, integer, interval),
    jobq_set_node(integer)
TO jobq_admin;
GRANT SELECT ON ALL TABLES IN SCHEMA jobq TO jobq_admin;

-- ---- src/sql/twins/edition.sql ----
-- What only the SQL edition has, after the shared SQL (scripts/build-sql-edition.py appends
-- it): the commit-time rings of waiting checkouts (src/sql/twins/waits.sql), and the passes
-- run by pg_cron.

-- Rings the bell of waiting checkouts (jobq.rings) once per transaction, at its commit: a
-- deferred constraint trigger runs as the transaction commits, as the session's role, outside
-- the jobq function that changed the row (hence SECURITY DEFINER).
CREATE FUNCTION jobq._ring() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, jobq, pg_temp AS $$
BEGIN
    IF current_setting('jobq.rang', true) IS DISTINCT FROM pg_current_xact_id()::text THEN
        PERFORM nextval('jobq.rings');
        PERFORM set_config('jobq.rang', pg_current_xact_id()::text, true);
    END IF;
    RETURN NULL;
END $$;

-- What may make a job available to a waiting checkout: a row made ready (an enqueue, a retry,
-- a resume of a snoozed or blocked job), a slot freed, a pause lifted, a rate limit changed,
-- a worker told to stop (its waiting calls return).
CREATE CONSTRAINT TRIGGER ring_ready AFTER INSERT ON jobq.ready
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION jobq._ring();
CREATE CONSTRAINT TRIGGER ring_slots AFTER DELETE ON jobq.slots
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION jobq._ring();
CREATE CONSTRAINT TRIGGER ring_pauses AFTER DELETE ON jobq.pauses
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION jobq._ring();
CREATE CONSTRAINT TRIGGER ring_rate_limits AFTER INSERT OR UPDATE OR DELETE ON jobq.rate_limits
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION jobq._ring();
CREATE CONSTRAINT TRIGGER ring_stopping AFTER UPDATE OF stopping_at ON jobq.workers
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION jobq._ring();

-- The pg_cron job that runs this database's passes: its name, and its schedule for
-- jobq.reap_interval rounded up to whole seconds (pg_cron runs at most every second, and
-- every N seconds for N < 60; longer intervals become whole minutes).
CREATE FUNCTION jobq._passes_job() RETURNS text
LANGUAGE sql STABLE SET search_path = pg_catalog, jobq, pg_temp AS $$
    SELECT 'jobq passes: ' || current_database()
$$;

CREATE FUNCTION jobq._passes_schedule() RETURNS text
LANGUAGE sql STABLE SET search_path = pg_catalog, jobq, pg_temp AS $$
    SELECT CASE WHEN s <= 59 THEN s || ' seconds'
                WHEN s <= 59 * 60 THEN '*/' || ceil(s / 60.0)::integer || ' * * * *'
                ELSE '0 * * * *' END
      FROM (SELECT greatest(1, ceil(extract(epoch FROM jobq._setting('jobq.reap_interval', '1 s'))))::integer AS s) i
$$;

-- pg_cron 1.5 or later, in this database; otherwise 0A000 saying what to do instead.
CREATE FUNCTION jobq._require_pg_cron() RETURNS void
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_version text := (SELECT e.extversion FROM pg_extension e WHERE e.extname = 'pg_cron');
BEGIN
    IF v_version IS NULL THEN
        RAISE EXCEPTION 'jobq: pg_cron is not installed in database "%"', current_database()
            USING ERRCODE = '0A000',
                  HINT = format('Where pg_cron lives in another database (cron.database_name), run there: SELECT cron.schedule_in_database(%L, %L, %L, %L); or let the client libraries'' workers run the passes.',
                                jobq._passes_job(), jobq._passes_schedule(), 'SELECT jobq_reap()', current_database());
    END IF;
    IF string_to_array(v_version, '.')::integer[] < ARRAY[1, 5] THEN
        RAISE EXCEPTION 'jobq: pg_cron % runs jobs at most once a minute; jobq''s passes need pg_cron 1.5 or later', v_version
            USING ERRCODE = '0A000';
    END IF;
END $$;

-- jobq_schedule_passes(): pg_cron runs jobq_reap() every jobq.reap_interval in this database,
-- as the role that installed jobq. Again: the schedule follows a changed jobq.reap_interval.
-- Returns pg_cron's job id.
CREATE FUNCTION jobq_schedule_passes() RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, jobq, pg_temp AS $$
BEGIN
    PERFORM jobq._require_pg_cron();
    RETURN cron.schedule(jobq._passes_job(), jobq._passes_schedule(), 'SELECT jobq_reap()');
END $$;

-- jobq_unschedule_passes(): pg_cron stops running them. False when they were not scheduled.
CREATE FUNCTION jobq_unschedule_passes() RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, jobq, pg_temp AS $$
BEGIN
    PERFORM jobq._require_pg_cron();
    IF NOT EXISTS (SELECT 1 FROM cron.job j WHERE j.jobname = jobq._passes_job() AND j.username = current_user) THEN
        RETURN false;
    END IF;
    RETURN cron.unschedule(jobq._passes_job());
END $$;

REVOKE ALL ON FUNCTION jobq._ring(), jobq._passes_job(), jobq._passes_schedule(), jobq._require_pg_cron(),
    jobq_schedule_passes(), jobq_unschedule_passes() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq_schedule_passes(), jobq_unschedule_passes() TO jobq_admin;
-- jobq.health reads the last pass through jobq._last_pass, as its reader (src/sql/twins/health.sql).
GRANT SELECT ON jobq.last_pass TO jobq_reader;

\else
SELECT e.version = '0.4.0' AS jobq_same, e.version AS jobq_installed FROM jobq._edition() e \gset
\if :jobq_same
\echo jobq 0.4.0 (SQL edition) is installed already: nothing changed
\else
SELECT set_config('jobq.installed', :'jobq_installed', true) AS jobq_installed \gset
DO $jobq$ BEGIN
    RAISE EXCEPTION 'jobq: this file installs jobq 0.4.0 and has no upgrade from %', current_setting('jobq.installed')
        USING ERRCODE = '55000', HINT = 'Run the files of the releases in between first, in order.';
END $jobq$;
\endif
\endif
COMMIT;
