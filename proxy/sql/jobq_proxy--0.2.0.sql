-- jobq_proxy: jobq over several PostgreSQL servers (nodes) behind PL/Proxy (the contract, "Scale-out").
-- Installed in the proxy database, beside PL/Proxy; every node is an ordinary database with
-- jobq, its background worker, and its own node number (jobq_set_node). The proxy offers
-- every jobq_* function with the node's signature and routes each call:
--   a queue              -> the queue's node (jobq.queue_node: a pinned placement, else a hash)
--   a job id             -> the node that made it (id % 1024, jobq_set_node on each node)
--   a lock key           -> the key's node (a hash)
--   a worker, jobq_reap  -> every node (one worker id everywhere)
-- The nodes are the partitions p0, p1, ... of the SQL/MED server `jobq` (docs/scale-out.md),
-- with modular_mapping: partition k is node k, any number of nodes.
--
-- How a call reaches a node: PL/Proxy connects as the calling role (the user mapping names no
-- other user), so every node checks that role's privileges and owns its workers by it, as if
-- the client were connected to the node. So every function here is SECURITY INVOKER. Each
-- remote call commits on its node when it returns (PL/Proxy has no distributed transaction):
-- a checkout through the proxy has claimed its jobs even if the client's transaction on the
-- proxy rolls back afterwards, exactly like a checkout whose reply was lost (heartbeat with
-- `holding`, or the reaper, gives them back).
--
-- A node that cannot be reached fails the calls routed to it with PL/Proxy's error, which
-- names it ("[dbname] ... connection to server at host, port ... failed"). The calls that go
-- to every node (heartbeat, unregister, reap, jobq.queue_stats, and checkouts of several
-- queues) pass over it with a WARNING naming it, so that the other nodes' work goes on.

\echo Use "CREATE EXTENSION jobq_proxy" to load this file. \quit

CREATE SCHEMA jobq;

-- The four roles of a node (the contract, Privileges), created here when the proxy's cluster has none:
-- a role is refused on the proxy what it would be refused on a node.
DO $$
DECLARE
    r text;
    v_prev text;
BEGIN
    LOCK TABLE pg_catalog.pg_authid IN SHARE ROW EXCLUSIVE MODE;
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

-- What a checkout returns: the node's jobq.job, column for column (PL/Proxy matches by name).
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

-- Queues pinned to a node. A queue without a row lives on node abs(hashtext(queue) % nodes);
-- pin the queues that exist before adding a node, so that none moves (docs/scale-out.md).
CREATE TABLE jobq.placements (
    queue  text PRIMARY KEY,
    node   integer NOT NULL CHECK (node >= 0 AND node < 1024)
);
-- Configuration: pg_dump of the proxy database keeps its rows (an extension's tables are
-- otherwise dumped empty), so a restored proxy routes every queue where it did.
SELECT pg_catalog.pg_extension_config_dump('jobq.placements', '');

---------------------------------------------------------------------------------------------
-- Routing

-- How many nodes: the partitions of the SQL/MED server `jobq`.
CREATE FUNCTION jobq.nodes() RETURNS integer
LANGUAGE sql STABLE SET search_path = pg_catalog AS $$
    SELECT count(*)::integer
      FROM pg_foreign_server s, pg_options_to_table(s.srvoptions) o
     WHERE s.srvname = 'jobq' AND o.option_name ~ '^p[0-9]+$';
$$;

-- A queue's node. NULL goes to node 0, which refuses it as a node does (22004).
CREATE FUNCTION jobq.queue_node(queue text) RETURNS integer
LANGUAGE sql STABLE SET search_path = pg_catalog AS $$
    SELECT coalesce((SELECT p.node FROM jobq.placements p WHERE p.queue = queue_node.queue),
                    abs(hashtext(coalesce(queue, '')) % greatest(jobq.nodes(), 1)));
$$;

-- The node a job id names (jobq_set_node). NULL goes to node 0, which refuses it.
CREATE FUNCTION jobq.job_node(job_id bigint) RETURNS integer
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog AS $$
    SELECT coalesce(job_id % 1024, 0)::integer;
$$;

-- A lock key's node.
CREATE FUNCTION jobq.lock_node(key text) RETURNS integer
LANGUAGE sql STABLE SET search_path = pg_catalog AS $$
    SELECT abs(hashtext(coalesce(key, '')) % greatest(jobq.nodes(), 1));
$$;

-- True when an error raised by PL/Proxy says that a node could not be reached (as opposed to
-- an error the node itself raised, which PL/Proxy passes on with its SQLSTATE and "REMOTE
-- ERROR"): the calls that go to every node pass over such a node.
CREATE FUNCTION jobq._unreachable(state text, message text) RETURNS boolean
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog AS $$
    SELECT state = 'XX000' AND message LIKE 'PL/Proxy function %' AND message NOT LIKE '%REMOTE ERROR%';
$$;

---------------------------------------------------------------------------------------------
-- Calls on one node, named by its number (the building blocks of the functions below)

CREATE FUNCTION jobq._checkout(node integer, worker uuid, queues text[], max_jobs integer, wait interval)
RETURNS SETOF jobq.job LANGUAGE plproxy SET search_path = pg_catalog, jobq, @extschema@, pg_temp AS $$
    CLUSTER 'jobq'; RUN ON node;
    SELECT * FROM jobq_checkout(worker, queues, max_jobs, wait);
$$;

CREATE FUNCTION jobq._complete_many(node integer, worker uuid, job_ids bigint[], results jsonb[])
RETURNS bigint[] LANGUAGE plproxy SET search_path = pg_catalog, jobq, @extschema@, pg_temp AS $$
    CLUSTER 'jobq'; RUN ON node;
    SELECT jobq_complete_many(worker, job_ids, results) AS _complete_many;
$$;

CREATE FUNCTION jobq._fail_many(node integer, worker uuid, job_ids bigint[], errors jsonb[])
RETURNS text[] LANGUAGE plproxy SET search_path = pg_catalog, jobq, @extschema@, pg_temp AS $$
    CLUSTER 'jobq'; RUN ON node;
    SELECT jobq_fail_many(worker, job_ids, errors) AS _fail_many;
$$;

CREATE FUNCTION jobq._complete_and_checkout(node integer, worker uuid, job_ids bigint[], results jsonb[],
                                            queues text[], max_jobs integer)
RETURNS SETOF jobq.job LANGUAGE plproxy SET search_path = pg_catalog, jobq, @extschema@, pg_temp AS $$
    CLUSTER 'jobq'; RUN ON node;
    SELECT * FROM jobq_complete_and_checkout(worker, job_ids, results, queues, max_jobs);
$$;

CREATE FUNCTION jobq._fail_and_checkout(node integer, worker uuid, job_ids bigint[], errors jsonb[],
                                        queues text[], max_jobs integer)
RETURNS SETOF jobq.job LANGUAGE plproxy SET search_path = pg_catalog, jobq, @extschema@, pg_temp AS $$
    CLUSTER 'jobq'; RUN ON node;
    SELECT * FROM jobq_fail_and_checkout(worker, job_ids, errors, queues, max_jobs);
$$;

CREATE FUNCTION jobq._heartbeat(node integer, worker uuid, holding bigint[])
RETURNS bigint[] LANGUAGE plproxy SET search_path = pg_catalog, jobq, @extschema@, pg_temp AS $$
    CLUSTER 'jobq'; RUN ON node;
    SELECT jobq_heartbeat(worker, holding) AS _heartbeat;
$$;

CREATE FUNCTION jobq._unregister_worker(node integer, worker uuid)
RETURNS integer LANGUAGE plproxy SET search_path = pg_catalog, jobq, @extschema@, pg_temp AS $$
    CLUSTER 'jobq'; RUN ON node;
    SELECT jobq_unregister_worker(worker) AS _unregister_worker;
$$;

CREATE FUNCTION jobq._reap(node integer)
RETURNS TABLE (workers_reaped integer, jobs_requeued integer, jobs_dead integer,
               locks_released integer, jobs_pruned integer)
LANGUAGE plproxy SET search_path = pg_catalog, jobq, @extschema@, pg_temp AS $$
    CLUSTER 'jobq'; RUN ON node;
    SELECT * FROM jobq_reap();
$$;

CREATE FUNCTION jobq._queue_stats(node integer)
RETURNS TABLE (queue text, ready bigint, scheduled bigint, executing bigint, dead bigint,
               oldest_ready_age interval)
LANGUAGE plproxy SET search_path = pg_catalog, jobq, @extschema@, pg_temp AS $$
    CLUSTER 'jobq'; RUN ON node;
    SELECT s.queue, s.ready, s.scheduled, s.executing, s.dead, s.oldest_ready_age FROM jobq.queue_stats s;
$$;

CREATE FUNCTION jobq._unschedule(node integer, name text)
RETURNS boolean LANGUAGE plproxy SET search_path = pg_catalog, jobq, @extschema@, pg_temp AS $$
    CLUSTER 'jobq'; RUN ON node;
    SELECT jobq_unschedule(name) AS _unschedule;
$$;

-- Calls on every node at once (in parallel): those a node that is down must fail, because
-- what they set would otherwise be missing there when it comes back.

CREATE FUNCTION jobq._register_worker(worker uuid, name text, metadata jsonb, bind_to_session boolean)
RETURNS SETOF uuid LANGUAGE plproxy SET search_path = pg_catalog, jobq, @extschema@, pg_temp AS $$
    CLUSTER 'jobq'; RUN ON ALL;
    TARGET jobq._register_worker;
$$;

CREATE FUNCTION jobq._set_rate_limit(key text, max_starts integer, per interval)
RETURNS SETOF void LANGUAGE plproxy SET search_path = pg_catalog, jobq, @extschema@, pg_temp AS $$
    CLUSTER 'jobq'; RUN ON ALL;
    SELECT jobq_set_rate_limit(key, max_starts, per);
$$;

CREATE FUNCTION jobq._pause_everywhere(queue text, kind text)
RETURNS SETOF void LANGUAGE plproxy SET search_path = pg_catalog, jobq, @extschema@, pg_temp AS $$
    CLUSTER 'jobq'; RUN ON ALL;
    SELECT jobq_pause(queue, kind);
$$;

CREATE FUNCTION jobq._resume_everywhere(queue text, kind text)
RETURNS SETOF void LANGUAGE plproxy SET search_path = pg_catalog, jobq, @extschema@, pg_temp AS $$
    CLUSTER 'jobq'; RUN ON ALL;
    SELECT jobq_resume(queue, kind);
$$;

---------------------------------------------------------------------------------------------
-- The jobq_* functions, routed

-- A queue's calls: on its node.

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
    rate_key          text        DEFAULT NULL
) RETURNS bigint LANGUAGE plproxy SET search_path = pg_catalog, jobq, @extschema@, pg_temp AS $$
    CLUSTER 'jobq'; RUN ON jobq.queue_node(queue);
$$;

CREATE FUNCTION jobq_enqueue_batch(
    queue        text,
    payloads     jsonb[],
    kind         text        DEFAULT NULL,
    priority     integer     DEFAULT 0,
    run_at       timestamptz DEFAULT NULL,
    max_attempts integer     DEFAULT 25
) RETURNS SETOF bigint LANGUAGE plproxy SET search_path = pg_catalog, jobq, @extschema@, pg_temp AS $$
    CLUSTER 'jobq'; RUN ON jobq.queue_node(queue);
$$;

-- A schedule lives on its queue's node. Replacing it with another queue moves it: written on
-- the new node first (a refused expression changes nothing anywhere), then removed from the
-- others. Replacements of one name through this proxy are serialised (an advisory lock), so two
-- of them cannot leave it on two nodes.
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
) RETURNS void LANGUAGE plpgsql SET search_path = pg_catalog, jobq, @extschema@, pg_temp AS $$
DECLARE
    v_node integer := jobq.queue_node(queue);
BEGIN
    IF name IS NOT NULL THEN
        PERFORM pg_advisory_xact_lock(1785684593, hashtext('schedule:' || name));
    END IF;
    PERFORM jobq._schedule(v_node, name, cron, queue, payload, kind, priority, max_attempts, time_zone, catch_up);
    PERFORM jobq._unschedule(n, name) FROM generate_series(0, jobq.nodes() - 1) n WHERE n <> v_node;
END $$;

CREATE FUNCTION jobq._schedule(node integer, name text, cron text, queue text, payload jsonb, kind text,
                               priority integer, max_attempts integer, time_zone text, catch_up boolean)
RETURNS void LANGUAGE plproxy SET search_path = pg_catalog, jobq, @extschema@, pg_temp AS $$
    CLUSTER 'jobq'; RUN ON node;
    SELECT jobq_schedule(name, cron, queue, payload, kind, priority, max_attempts, time_zone, catch_up);
$$;

CREATE FUNCTION jobq_unschedule(name text) RETURNS boolean
LANGUAGE sql SET search_path = pg_catalog, jobq, @extschema@, pg_temp AS $$
    SELECT coalesce(bool_or(jobq._unschedule(n, name)), false) FROM generate_series(0, jobq.nodes() - 1) n;
$$;

-- A pause of a queue (or of a kind within it) on the queue's node; of a kind in every queue,
-- on every node.
CREATE FUNCTION jobq_pause(queue text, kind text DEFAULT NULL) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, @extschema@, pg_temp AS $$
BEGIN
    IF queue IS NULL THEN
        PERFORM count(*) FROM jobq._pause_everywhere(queue, kind);
    ELSE
        PERFORM jobq._pause_on(jobq.queue_node(queue), queue, kind);
    END IF;
END $$;

CREATE FUNCTION jobq_resume(queue text, kind text DEFAULT NULL) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, @extschema@, pg_temp AS $$
BEGIN
    IF queue IS NULL THEN
        PERFORM count(*) FROM jobq._resume_everywhere(queue, kind);
    ELSE
        PERFORM jobq._resume_on(jobq.queue_node(queue), queue, kind);
    END IF;
END $$;

CREATE FUNCTION jobq._pause_on(node integer, queue text, kind text)
RETURNS void LANGUAGE plproxy SET search_path = pg_catalog, jobq, @extschema@, pg_temp AS $$
    CLUSTER 'jobq'; RUN ON node;
    SELECT jobq_pause(queue, kind);
$$;

CREATE FUNCTION jobq._resume_on(node integer, queue text, kind text)
RETURNS void LANGUAGE plproxy SET search_path = pg_catalog, jobq, @extschema@, pg_temp AS $$
    CLUSTER 'jobq'; RUN ON node;
    SELECT jobq_resume(queue, kind);
$$;

-- Rate keys are enforced per node: the limit is set on every node.
CREATE FUNCTION jobq_set_rate_limit(key text, max_starts integer, per interval) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, @extschema@, pg_temp AS $$
BEGIN
    PERFORM count(*) FROM jobq._set_rate_limit(key, max_starts, per);
END $$;

-- A job's calls: on the node its id names.

CREATE FUNCTION jobq_complete(job_id bigint, worker uuid, result jsonb DEFAULT NULL) RETURNS boolean
LANGUAGE plproxy SET search_path = pg_catalog, jobq, @extschema@, pg_temp AS $$
    CLUSTER 'jobq'; RUN ON jobq.job_node(job_id);
$$;

CREATE FUNCTION jobq_fail(job_id bigint, worker uuid, error jsonb DEFAULT NULL,
                          retry_in interval DEFAULT NULL, discard boolean DEFAULT false) RETURNS text
LANGUAGE plproxy SET search_path = pg_catalog, jobq, @extschema@, pg_temp AS $$
    CLUSTER 'jobq'; RUN ON jobq.job_node(job_id);
$$;

CREATE FUNCTION jobq_cancel(job_id bigint) RETURNS text
LANGUAGE plproxy SET search_path = pg_catalog, jobq, @extschema@, pg_temp AS $$
    CLUSTER 'jobq'; RUN ON jobq.job_node(job_id);
$$;

CREATE FUNCTION jobq_retry(job_id bigint) RETURNS boolean
LANGUAGE plproxy SET search_path = pg_catalog, jobq, @extschema@, pg_temp AS $$
    CLUSTER 'jobq'; RUN ON jobq.job_node(job_id);
$$;

-- Many jobs: each node gets its own, in one call; the answers come back in the caller's order.
-- A batch a node would refuse (jobq._batch_ok) goes whole to one node, which refuses it with its
-- own error and changes nothing, as the node's call would: never part of it done elsewhere.
CREATE FUNCTION jobq._batch_ok(worker uuid, job_ids bigint[], per_job jsonb[]) RETURNS boolean
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog AS $$
    SELECT worker IS NOT NULL AND job_ids IS NOT NULL AND array_position(job_ids, NULL) IS NULL
       AND cardinality(job_ids) <= 10000
       AND cardinality(job_ids) = (SELECT count(DISTINCT d) FROM unnest(job_ids) d)
       AND (per_job IS NULL OR cardinality(per_job) = cardinality(job_ids));
$$;

CREATE FUNCTION jobq_complete_many(worker uuid, job_ids bigint[], results jsonb[] DEFAULT NULL)
RETURNS bigint[] LANGUAGE plpgsql SET search_path = pg_catalog, jobq, @extschema@, pg_temp AS $$
DECLARE
    v_done bigint[] := '{}';
    n      integer;
BEGIN
    IF NOT coalesce(jobq._batch_ok(worker, job_ids, results), false) THEN
        RETURN jobq._complete_many(jobq.job_node((SELECT min(i) FROM unnest(job_ids) i)), worker, job_ids, results);
    END IF;
    FOR n IN SELECT DISTINCT jobq.job_node(i) FROM unnest(job_ids) i LOOP
        v_done := v_done || jobq._complete_many(n, worker,
            ARRAY(SELECT u.i FROM unnest(job_ids) WITH ORDINALITY u(i, o) WHERE jobq.job_node(u.i) = n ORDER BY u.o),
            CASE WHEN results IS NOT NULL THEN
                ARRAY(SELECT u.r FROM unnest(job_ids, results) WITH ORDINALITY u(i, r, o) WHERE jobq.job_node(u.i) = n ORDER BY u.o)
            END);
    END LOOP;
    RETURN ARRAY(SELECT u.i FROM unnest(job_ids) WITH ORDINALITY u(i, o) WHERE u.i = ANY (v_done) ORDER BY u.o);
END $$;

CREATE FUNCTION jobq_fail_many(worker uuid, job_ids bigint[], errors jsonb[] DEFAULT NULL)
RETURNS text[] LANGUAGE plpgsql SET search_path = pg_catalog, jobq, @extschema@, pg_temp AS $$
DECLARE
    v_states text[];
    v_pos    bigint[];
    v_got    text[];
    n        integer;
BEGIN
    IF NOT coalesce(jobq._batch_ok(worker, job_ids, errors), false) THEN
        RETURN jobq._fail_many(jobq.job_node((SELECT min(i) FROM unnest(job_ids) i)), worker, job_ids, errors);
    END IF;
    -- Positions are those of unnest (storage order), whatever the arrays' subscripts.
    v_states := array_fill(NULL::text, ARRAY[cardinality(job_ids)]);
    FOR n IN SELECT DISTINCT jobq.job_node(i) FROM unnest(job_ids) i LOOP
        v_pos := ARRAY(SELECT u.o FROM unnest(job_ids) WITH ORDINALITY u(i, o) WHERE jobq.job_node(u.i) = n ORDER BY u.o);
        v_got := jobq._fail_many(n, worker,
            ARRAY(SELECT u.i FROM unnest(job_ids) WITH ORDINALITY u(i, o) WHERE jobq.job_node(u.i) = n ORDER BY u.o),
            CASE WHEN errors IS NOT NULL THEN
                ARRAY(SELECT u.e FROM unnest(job_ids, errors) WITH ORDINALITY u(i, e, o) WHERE jobq.job_node(u.i) = n ORDER BY u.o)
            END);
        FOR k IN 1 .. cardinality(v_pos) LOOP
            v_states[v_pos[k]] := v_got[k];
        END LOOP;
    END LOOP;
    RETURN v_states;
END $$;

-- A lock's calls: on its key's node.

CREATE FUNCTION jobq_acquire_lock(key text, worker uuid, ttl interval DEFAULT '5 minutes') RETURNS boolean
LANGUAGE plproxy SET search_path = pg_catalog, jobq, @extschema@, pg_temp AS $$
    CLUSTER 'jobq'; RUN ON jobq.lock_node(key);
$$;

CREATE FUNCTION jobq_release_lock(key text, worker uuid) RETURNS boolean
LANGUAGE plproxy SET search_path = pg_catalog, jobq, @extschema@, pg_temp AS $$
    CLUSTER 'jobq'; RUN ON jobq.lock_node(key);
$$;

CREATE FUNCTION jobq_lock_holder(key text) RETURNS uuid
LANGUAGE plproxy SET search_path = pg_catalog, jobq, @extschema@, pg_temp AS $$
    CLUSTER 'jobq'; RUN ON jobq.lock_node(key);
$$;

-- A worker's calls: on every node, with one id.

-- One id, chosen here, registered on every node at once. bind_to_session cannot be kept: the
-- node sessions belong to the proxy's connections, not to the client's session.
CREATE FUNCTION jobq_register_worker(name text DEFAULT NULL, metadata jsonb DEFAULT '{}',
                                     bind_to_session boolean DEFAULT false)
RETURNS uuid LANGUAGE plpgsql SET search_path = pg_catalog, jobq, @extschema@, pg_temp AS $$
DECLARE
    v_id uuid := gen_random_uuid();
BEGIN
    IF bind_to_session THEN
        RAISE EXCEPTION 'jobq: bind_to_session is not available through jobq_proxy'
            USING ERRCODE = '0A000',
                  DETAIL = 'The proxy reaches the nodes over its own connections: no node session is the client''s.',
                  HINT = 'Register without bind_to_session and heartbeat.';
    END IF;
    PERFORM count(*) FROM jobq._register_worker(v_id, name, metadata, bind_to_session);
    RETURN v_id;
END $$;

-- On every node that answers; a node that cannot be reached is passed over with a WARNING
-- (its copy of the worker runs out of heartbeat there, and that node's reaper gives back the
-- jobs it held there). Returns the union of the nodes' answers.
CREATE FUNCTION jobq_heartbeat(worker uuid, holding bigint[] DEFAULT NULL) RETURNS bigint[]
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, @extschema@, pg_temp AS $$
DECLARE
    v_cancel bigint[] := '{}';
    v_missed integer := 0;
    n        integer;
BEGIN
    FOR n IN 0 .. jobq.nodes() - 1 LOOP
        BEGIN
            v_cancel := v_cancel || jobq._heartbeat(n, worker, holding);
        EXCEPTION WHEN internal_error THEN
            IF NOT jobq._unreachable(SQLSTATE, SQLERRM) THEN RAISE; END IF;
            RAISE WARNING 'jobq_proxy: node % not reached, passed over: %', n, SQLERRM;
            v_missed := v_missed + 1;
        END;
    END LOOP;
    IF v_missed > 0 AND v_missed = jobq.nodes() THEN
        RAISE EXCEPTION 'jobq_proxy: no node could be reached' USING ERRCODE = '08006';
    END IF;
    RETURN v_cancel;
END $$;

-- A node where the worker is unknown (reaped there while that node was out of reach: JQ001)
-- does not keep the others from giving its jobs back; JQ001 is raised only when no node knew it.
CREATE FUNCTION jobq_unregister_worker(worker uuid) RETURNS integer
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, @extschema@, pg_temp AS $$
DECLARE
    v_requeued integer := 0;
    v_known    boolean := false;
    v_unknown  text;
    n          integer;
BEGIN
    FOR n IN 0 .. jobq.nodes() - 1 LOOP
        BEGIN
            v_requeued := v_requeued + jobq._unregister_worker(n, worker);
            v_known := true;
        EXCEPTION
            WHEN SQLSTATE 'JQ001' THEN
                v_unknown := SQLERRM;
            WHEN internal_error THEN
                IF NOT jobq._unreachable(SQLSTATE, SQLERRM) THEN RAISE; END IF;
                RAISE WARNING 'jobq_proxy: node % not reached, passed over: %', n, SQLERRM;
        END;
    END LOOP;
    IF NOT v_known AND v_unknown IS NOT NULL THEN
        RAISE EXCEPTION '%', v_unknown USING ERRCODE = 'JQ001',
            HINT = 'Stop its jobs and register again with jobq_register_worker().';
    END IF;
    RETURN v_requeued;
END $$;

-- One pass on every node that answers; the counts summed.
CREATE FUNCTION jobq_reap()
RETURNS TABLE (workers_reaped integer, jobs_requeued integer, jobs_dead integer,
               locks_released integer, jobs_pruned integer)
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, @extschema@, pg_temp AS $$
DECLARE
    r record;
    n integer;
BEGIN
    workers_reaped := 0; jobs_requeued := 0; jobs_dead := 0; locks_released := 0; jobs_pruned := 0;
    FOR n IN 0 .. jobq.nodes() - 1 LOOP
        BEGIN
            SELECT * INTO r FROM jobq._reap(n);
            workers_reaped := workers_reaped + r.workers_reaped;
            jobs_requeued := jobs_requeued + r.jobs_requeued;
            jobs_dead := jobs_dead + r.jobs_dead;
            locks_released := locks_released + r.locks_released;
            jobs_pruned := jobs_pruned + r.jobs_pruned;
        EXCEPTION WHEN internal_error THEN
            IF NOT jobq._unreachable(SQLSTATE, SQLERRM) THEN RAISE; END IF;
            RAISE WARNING 'jobq_proxy: node % not reached, passed over: %', n, SQLERRM;
        END;
    END LOOP;
    RETURN NEXT;
END $$;

-- Checkout. One queue, or queues that all live on one node: that node's checkout, `wait`
-- included. Queues on several nodes, or none (any queue): each of those nodes in turn, from a
-- random one, is asked for what is still missing, until max_jobs are claimed or every node has
-- answered; so no node is starved while another has work. Jobs claimed are always returned: a
-- node that fails after others gave jobs ends the round with a WARNING instead of an error
-- (they are claimed on their nodes, committed there). With `wait`, when a round found
-- nothing, the call waits on each node in turn for at most 200 ms, then asks every node again,
-- until `wait` runs out: a job made available on another node than the one waited on is seen
-- within a slice. Meanwhile it heartbeats the worker on every node every 5 s: a node keeps a
-- waiting worker alive only while the wait is its own (src/waits.rs), a slice in k here.
CREATE FUNCTION jobq_checkout(worker uuid, queues text[] DEFAULT NULL, max_jobs integer DEFAULT 1,
                              wait interval DEFAULT NULL)
RETURNS SETOF jobq.job LANGUAGE plpgsql SET search_path = pg_catalog, jobq, @extschema@, pg_temp AS $$
DECLARE
    v_nodes  integer[];
    v_k      integer;
    v_start  integer;
    v_left   integer;
    v_got    integer;
    v_until  timestamptz;
    v_beat   timestamptz := clock_timestamp();
    v_slice  interval := interval '200 milliseconds';
    v_missed integer;
    v_stop   boolean := false;
    n        integer;
    i        integer;
BEGIN
    -- The node's own refusals, before anything is asked of several nodes.
    IF max_jobs IS NULL OR worker IS NULL OR max_jobs < 1 OR max_jobs > 10000
       OR wait <= interval '0' OR wait > interval '1 hour' THEN
        RETURN QUERY SELECT * FROM jobq._checkout(0, worker, queues, max_jobs, wait);
        RETURN;
    END IF;
    IF queues IS NULL THEN
        v_nodes := ARRAY(SELECT generate_series(0, jobq.nodes() - 1));
    ELSE
        v_nodes := ARRAY(SELECT DISTINCT jobq.queue_node(q) FROM unnest(queues) q ORDER BY 1);
    END IF;
    v_k := cardinality(v_nodes);
    IF v_k <= 1 THEN
        RETURN QUERY SELECT * FROM jobq._checkout(coalesce(v_nodes[1], 0), worker, queues, max_jobs, wait);
        RETURN;
    END IF;
    IF wait IS NOT NULL THEN
        v_until := clock_timestamp() + wait;
    END IF;
    v_start := floor(random() * v_k)::integer;
    v_left := max_jobs;
    LOOP
        v_missed := 0;
        FOR i IN 0 .. v_k - 1 LOOP
            n := v_nodes[1 + (v_start + i) % v_k];
            BEGIN
                RETURN QUERY SELECT * FROM jobq._checkout(n, worker, jobq._queues_on(queues, n), v_left, NULL);
                GET DIAGNOSTICS v_got = ROW_COUNT;
                v_left := v_left - v_got;
            EXCEPTION WHEN OTHERS THEN
                IF v_left < max_jobs THEN
                    RAISE WARNING 'jobq_proxy: node % failed after other nodes gave jobs, which are returned: %', n, SQLERRM;
                    v_stop := true;
                ELSIF jobq._unreachable(SQLSTATE, SQLERRM) THEN
                    RAISE WARNING 'jobq_proxy: node % not reached, passed over: %', n, SQLERRM;
                    v_missed := v_missed + 1;
                ELSE
                    RAISE;
                END IF;
            END;
            EXIT WHEN v_left = 0 OR v_stop;
        END LOOP;
        IF v_missed = v_k THEN
            RAISE EXCEPTION 'jobq_proxy: no node of these queues could be reached' USING ERRCODE = '08006';
        END IF;
        EXIT WHEN v_left < max_jobs OR wait IS NULL OR clock_timestamp() >= v_until;
        IF clock_timestamp() - v_beat >= interval '5 seconds' THEN
            PERFORM @extschema@.jobq_heartbeat(worker);
            v_beat := clock_timestamp();
        END IF;
        -- Nothing anywhere: wait on the next node for a slice, then look at all of them again.
        n := v_nodes[1 + v_start % v_k];
        v_start := v_start + 1;
        BEGIN
            RETURN QUERY SELECT * FROM jobq._checkout(n, worker, jobq._queues_on(queues, n), max_jobs,
                least(v_slice, greatest(v_until - clock_timestamp(), interval '1 millisecond')));
            GET DIAGNOSTICS v_got = ROW_COUNT;
            v_left := v_left - v_got;
        EXCEPTION WHEN internal_error THEN
            IF NOT jobq._unreachable(SQLSTATE, SQLERRM) THEN RAISE; END IF;
            PERFORM pg_sleep(extract(epoch FROM v_slice));
        END;
        EXIT WHEN v_left < max_jobs OR clock_timestamp() >= v_until;
    END LOOP;
END $$;

-- The queues of `queues` that live on node `node` (NULL: any queue).
CREATE FUNCTION jobq._queues_on(queues text[], node integer) RETURNS text[]
LANGUAGE sql STABLE SET search_path = pg_catalog AS $$
    SELECT CASE WHEN queues IS NOT NULL THEN
                ARRAY(SELECT q FROM unnest(queues) q WHERE jobq.queue_node(q) = node)
           END;
$$;

-- The one-commit protocol: one call on one node when the jobs in hand and the queues asked for
-- are all on that node (the node's own call: all or nothing). Otherwise the jobs are finished
-- on their nodes (each node's part commits there), then the checkout runs as above; a job no
-- longer held raises JQ002 before anything is checked out, as on a node, but the jobs finished
-- on the way stay finished (there is no transaction across nodes). Input a node would refuse
-- goes whole to one node first, so that it changes nothing.
CREATE FUNCTION jobq_complete_and_checkout(worker uuid, job_ids bigint[], results jsonb[] DEFAULT NULL,
                                           queues text[] DEFAULT NULL, max_jobs integer DEFAULT 1)
RETURNS SETOF jobq.job LANGUAGE sql SET search_path = pg_catalog, jobq, @extschema@, pg_temp AS $$
    SELECT * FROM jobq._finish_and_checkout(false, worker, job_ids, results, queues, max_jobs);
$$;

CREATE FUNCTION jobq_fail_and_checkout(worker uuid, job_ids bigint[], errors jsonb[] DEFAULT NULL,
                                       queues text[] DEFAULT NULL, max_jobs integer DEFAULT 1)
RETURNS SETOF jobq.job LANGUAGE sql SET search_path = pg_catalog, jobq, @extschema@, pg_temp AS $$
    SELECT * FROM jobq._finish_and_checkout(true, worker, job_ids, errors, queues, max_jobs);
$$;

-- Both one-commit calls: `failing` chooses fail over complete, `per_job` is their results or
-- errors.
CREATE FUNCTION jobq._finish_and_checkout(failing boolean, worker uuid, job_ids bigint[], per_job jsonb[],
                                          queues text[], max_jobs integer)
RETURNS SETOF jobq.job LANGUAGE plpgsql SET search_path = pg_catalog, jobq, @extschema@, pg_temp AS $$
DECLARE
    v_node integer := jobq._only_node(job_ids, queues);
    v_kept bigint[];
BEGIN
    IF v_node IS NULL AND NOT coalesce(jobq._batch_ok(worker, job_ids, per_job), false) THEN
        v_node := jobq.job_node((SELECT min(i) FROM unnest(job_ids) i));  -- it refuses the batch
    ELSIF v_node IS NULL AND (max_jobs IS NULL OR max_jobs < 1 OR max_jobs > 10000) THEN
        -- Node 0 refuses the checkout, with nothing to finish first.
        v_node := 0; job_ids := '{}'; per_job := NULL;
    END IF;
    IF v_node IS NOT NULL AND failing THEN
        RETURN QUERY SELECT * FROM jobq._fail_and_checkout(v_node, worker, job_ids, per_job, queues, max_jobs);
    ELSIF v_node IS NOT NULL THEN
        RETURN QUERY SELECT * FROM jobq._complete_and_checkout(v_node, worker, job_ids, per_job, queues, max_jobs);
    ELSE
        IF cardinality(job_ids) > 0 AND failing THEN
            v_kept := ARRAY(SELECT u.i FROM unnest(job_ids, @extschema@.jobq_fail_many(worker, job_ids, per_job)) u(i, st)
                             WHERE u.st IS NOT NULL);
        ELSIF cardinality(job_ids) > 0 THEN
            v_kept := @extschema@.jobq_complete_many(worker, job_ids, per_job);
        END IF;
        IF cardinality(job_ids) > 0 THEN
            PERFORM jobq._refuse_fenced(worker, job_ids, v_kept);
        END IF;
        RETURN QUERY SELECT * FROM @extschema@.jobq_checkout(worker, queues, max_jobs);
    END IF;
END $$;

-- JQ002 for the jobs of `job_ids` not in `kept` (no longer executing under the worker), as the
-- node's one-commit calls say it.
CREATE FUNCTION jobq._refuse_fenced(worker uuid, job_ids bigint[], kept bigint[]) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, pg_temp AS $$
BEGIN
    IF cardinality(kept) = cardinality(job_ids) THEN
        RETURN;
    END IF;
    RAISE EXCEPTION 'jobq: jobs % are no longer executing under worker %; the others were finished on their nodes, nothing was checked out',
        ARRAY(SELECT d FROM unnest(job_ids) d WHERE d <> ALL (kept)), worker
        USING ERRCODE = 'JQ002',
              HINT = 'Stop working on those jobs (cancelled, or finished elsewhere); finish the others and check out again.';
END $$;

-- The one node that every job id and every queue names, or NULL when they name several (or
-- when queues is NULL, any queue, behind more than one node). Empty or NULL job_ids and
-- queues that name one node: that node, which also refuses bad input itself.
CREATE FUNCTION jobq._only_node(job_ids bigint[], queues text[]) RETURNS integer
LANGUAGE sql STABLE SET search_path = pg_catalog, jobq, @extschema@, pg_temp AS $$
    SELECT CASE WHEN count(DISTINCT x.node) = 1 THEN min(x.node)
                WHEN count(*) = 0 THEN 0 END
      FROM (SELECT jobq.job_node(i) AS node FROM unnest(job_ids) i
            UNION ALL
            SELECT jobq.queue_node(q) FROM unnest(queues) q
            UNION ALL
            SELECT g FROM generate_series(0, jobq.nodes() - 1) g WHERE queues IS NULL) x;
$$;

-- Sets the node number of the database behind partition `node` (run once per node, right
-- after CREATE EXTENSION jobq there): SELECT jobq_set_node(n) FROM generate_series(0, 2) n.
CREATE FUNCTION jobq_set_node(node integer) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, @extschema@, pg_temp AS $$
BEGIN
    IF node IS NOT NULL AND (node < 0 OR node >= jobq.nodes()) THEN
        RAISE EXCEPTION 'jobq: node must be between 0 and %, the partitions of server jobq, got %',
            jobq.nodes() - 1, node USING ERRCODE = '22023';
    END IF;
    PERFORM jobq._set_node(coalesce(node, 0), node);
END $$;

CREATE FUNCTION jobq._set_node(partition integer, node integer)
RETURNS void LANGUAGE plproxy SET search_path = pg_catalog, jobq, @extschema@, pg_temp AS $$
    CLUSTER 'jobq'; RUN ON partition;
    SELECT jobq_set_node(node);
$$;

---------------------------------------------------------------------------------------------
-- Observing: every node's queues in one view (a node that cannot be reached is passed over
-- with a WARNING). A queue lives on one node, so its row comes from that node alone.

CREATE FUNCTION jobq._all_queue_stats()
RETURNS TABLE (queue text, ready bigint, scheduled bigint, executing bigint, dead bigint,
               oldest_ready_age interval)
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, jobq, @extschema@, pg_temp AS $$
DECLARE
    n integer;
BEGIN
    FOR n IN 0 .. jobq.nodes() - 1 LOOP
        BEGIN
            RETURN QUERY SELECT * FROM jobq._queue_stats(n);
        EXCEPTION WHEN internal_error THEN
            IF NOT jobq._unreachable(SQLSTATE, SQLERRM) THEN RAISE; END IF;
            RAISE WARNING 'jobq_proxy: node % not reached, passed over: %', n, SQLERRM;
        END;
    END LOOP;
END $$;

-- One row per queue: a queue re-pinned to another node has jobs on two nodes while the old one
-- drains, and its counts are summed.
CREATE VIEW jobq.queue_stats AS
SELECT s.queue, sum(s.ready)::bigint AS ready, sum(s.scheduled)::bigint AS scheduled,
       sum(s.executing)::bigint AS executing, sum(s.dead)::bigint AS dead,
       max(s.oldest_ready_age) AS oldest_ready_age
  FROM jobq._all_queue_stats() s
 GROUP BY s.queue;

---------------------------------------------------------------------------------------------
-- Privileges: as on a node (the contract, Privileges). The nodes check them again, as the same role.

DO $$
DECLARE
    f regprocedure;
BEGIN
    FOR f IN
        SELECT d.objid::regprocedure FROM pg_catalog.pg_depend d
         WHERE d.classid = 'pg_catalog.pg_proc'::regclass AND d.deptype = 'e'
           AND d.refclassid = 'pg_catalog.pg_extension'::regclass
           AND d.refobjid = (SELECT e.oid FROM pg_catalog.pg_extension e WHERE e.extname = 'jobq_proxy')
    LOOP
        EXECUTE format('REVOKE ALL ON FUNCTION %s FROM PUBLIC', f);
    END LOOP;
END $$;

GRANT USAGE ON SCHEMA jobq TO jobq_reader;
GRANT SELECT ON jobq.queue_stats, jobq.placements TO jobq_reader;
-- The routing helpers every routed call evaluates, and the reader's view's function.
GRANT EXECUTE ON FUNCTION jobq.nodes(), jobq.queue_node(text), jobq.job_node(bigint), jobq.lock_node(text),
    jobq._unreachable(text, text), jobq._all_queue_stats(), jobq._queue_stats(integer)
TO jobq_reader;

GRANT EXECUTE ON FUNCTION
    jobq_enqueue(text, jsonb, text, integer, timestamptz, integer, text, text, text, text, integer, text),
    jobq_enqueue_batch(text, jsonb[], text, integer, timestamptz, integer),
    jobq_cancel(bigint),
    jobq_retry(bigint)
TO jobq_producer;

GRANT EXECUTE ON FUNCTION
    jobq_register_worker(text, jsonb, boolean),
    jobq._register_worker(uuid, text, jsonb, boolean),
    jobq_heartbeat(uuid, bigint[]),
    jobq._heartbeat(integer, uuid, bigint[]),
    jobq_unregister_worker(uuid),
    jobq._unregister_worker(integer, uuid),
    jobq_checkout(uuid, text[], integer, interval),
    jobq._checkout(integer, uuid, text[], integer, interval),
    jobq_complete(bigint, uuid, jsonb),
    jobq_fail(bigint, uuid, jsonb, interval, boolean),
    jobq_complete_many(uuid, bigint[], jsonb[]),
    jobq._complete_many(integer, uuid, bigint[], jsonb[]),
    jobq_fail_many(uuid, bigint[], jsonb[]),
    jobq._fail_many(integer, uuid, bigint[], jsonb[]),
    jobq_complete_and_checkout(uuid, bigint[], jsonb[], text[], integer),
    jobq._complete_and_checkout(integer, uuid, bigint[], jsonb[], text[], integer),
    jobq_fail_and_checkout(uuid, bigint[], jsonb[], text[], integer),
    jobq._fail_and_checkout(integer, uuid, bigint[], jsonb[], text[], integer),
    jobq._only_node(bigint[], text[]),
    jobq._finish_and_checkout(boolean, uuid, bigint[], jsonb[], text[], integer),
    jobq._batch_ok(uuid, bigint[], jsonb[]),
    jobq._queues_on(text[], integer),
    jobq._refuse_fenced(uuid, bigint[], bigint[]),
    jobq_acquire_lock(text, uuid, interval),
    jobq_release_lock(text, uuid),
    jobq_lock_holder(text)
TO jobq_worker;

GRANT EXECUTE ON FUNCTION
    jobq_pause(text, text),
    jobq._pause_on(integer, text, text),
    jobq._pause_everywhere(text, text),
    jobq_resume(text, text),
    jobq._resume_on(integer, text, text),
    jobq._resume_everywhere(text, text),
    jobq_reap(),
    jobq._reap(integer),
    jobq_schedule(text, text, text, jsonb, text, integer, integer, text, boolean),
    jobq._schedule(integer, text, text, text, jsonb, text, integer, integer, text, boolean),
    jobq_unschedule(text),
    jobq._unschedule(integer, text),
    jobq_set_rate_limit(text, integer, interval),
    jobq._set_rate_limit(text, integer, interval),
    jobq_set_node(integer),
    jobq._set_node(integer, integer)
TO jobq_admin;
GRANT INSERT, UPDATE, DELETE ON jobq.placements TO jobq_admin;
