-- jobq_proxy 0.2.0 -> 0.3.0: jobq 0.3's workflows and durable jobs through the proxy (the contract,
-- "Workflows and durable jobs" and "Scale-out"). A fresh CREATE EXTENSION jobq_proxy installs
-- 0.2.0 and runs this script, so a fresh install and an upgraded one are the same.
--   jobq_emit_event        -> every node, the sum of what each woke
--   a job's calls          -> the node its id names (checkpoint, snooze, awaits)
--   jobq_results           -> each id's node, the answers in the caller's order
--   depends_on, awaits     -> must name jobs of the job's own node, else 0A000
\echo Use "CREATE EXTENSION jobq_proxy" or "ALTER EXTENSION jobq_proxy UPDATE" to load this file. \quit

-- What a checkout returns gains the node's two new columns, in the node's order.
ALTER TYPE jobq.job ADD ATTRIBUTE depends_on bigint[], ADD ATTRIBUTE checkpoints jsonb;

-- Refuses `ids` that name jobs of another node than `node` (the contract: 0A000): a dependency or an
-- await is kept by one node's transactions, which cannot see another node's jobs finish.
CREATE FUNCTION jobq._same_node(node integer, ids bigint[], what text) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, @extschema@, pg_temp AS $$
DECLARE
    v_other bigint;
BEGIN
    SELECT i INTO v_other FROM unnest(ids) i WHERE i IS NOT NULL AND jobq.job_node(i) <> node LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'jobq_proxy: % names job %, of node %, not of node %', what, v_other, jobq.job_node(v_other), node
            USING ERRCODE = '0A000',
                  DETAIL = 'Dependencies and awaits hold among the jobs of one node.',
                  HINT = 'Place the queues of one workflow on one node (jobq.placements).';
    END IF;
END $$;

-- jobq_enqueue gains depends_on and on_parent_failure: on the queue's node, its parents there.
DROP FUNCTION jobq_enqueue(text, jsonb, text, integer, timestamptz, integer, text, text, text, text, integer, text);
CREATE FUNCTION jobq._enqueue(
    node              integer,
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
) RETURNS bigint LANGUAGE plproxy SET search_path = pg_catalog, jobq, @extschema@, pg_temp AS $$
    CLUSTER 'jobq'; RUN ON node;
    SELECT jobq_enqueue(queue, payload, kind, priority, run_at, max_attempts, unique_key, unique_strategy,
                        on_conflict, concurrency_key, concurrency_limit, rate_key, depends_on, on_parent_failure);
$$;
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
) RETURNS bigint LANGUAGE plpgsql SET search_path = pg_catalog, jobq, @extschema@, pg_temp AS $$
DECLARE
    v_node integer := jobq.queue_node(queue);
BEGIN
    PERFORM jobq._same_node(v_node, depends_on, 'depends_on');
    RETURN jobq._enqueue(v_node, queue, payload, kind, priority, run_at, max_attempts, unique_key,
                         unique_strategy, on_conflict, concurrency_key, concurrency_limit, rate_key,
                         depends_on, on_parent_failure);
END $$;

-- A graph in one call (an addition to the contract): on the node of its queues, which must be one node, as
-- must its depends_on jobs (0A000 otherwise). Input the node would refuse goes to node 0,
-- which refuses it with its own error.
CREATE FUNCTION jobq._enqueue_graph(node integer, jobs jsonb) RETURNS SETOF bigint
LANGUAGE plproxy SET search_path = pg_catalog, jobq, @extschema@, pg_temp AS $$
    CLUSTER 'jobq'; RUN ON node;
    SELECT id FROM jobq_enqueue_graph(jobs) AS id;
$$;
CREATE FUNCTION jobq_enqueue_graph(jobs jsonb) RETURNS SETOF bigint
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, @extschema@, pg_temp AS $$
DECLARE
    v_nodes integer[];
BEGIN
    IF jobs IS NOT NULL AND jsonb_typeof(jobs) = 'array' THEN
        v_nodes := ARRAY(SELECT DISTINCT jobq.queue_node(e ->> 'queue') FROM jsonb_array_elements(jobs) e
                          WHERE jsonb_typeof(e) = 'object');
    END IF;
    IF cardinality(v_nodes) > 1 THEN
        RAISE EXCEPTION 'jobq_proxy: a graph''s queues live on nodes %', v_nodes
            USING ERRCODE = '0A000',
                  DETAIL = 'Dependencies hold among the jobs of one node.',
                  HINT = 'Place the queues of one workflow on one node (jobq.placements).';
    END IF;
    IF cardinality(v_nodes) = 1 THEN
        PERFORM jobq._same_node(v_nodes[1], ARRAY(
            SELECT (d::text)::numeric::bigint
              FROM jsonb_array_elements(jobs) e, jsonb_array_elements(e -> 'depends_on') d
             WHERE jsonb_typeof(e) = 'object' AND jsonb_typeof(e -> 'depends_on') = 'array' AND jsonb_typeof(d) = 'number'),
            'depends_on');
    END IF;
    RETURN QUERY SELECT * FROM jobq._enqueue_graph(coalesce(v_nodes[1], 0), jobs);
END $$;

-- A job's calls: on the node its id names.
CREATE FUNCTION jobq_checkpoint(job_id bigint, worker uuid, step text, value jsonb) RETURNS boolean
LANGUAGE plproxy SET search_path = pg_catalog, jobq, @extschema@, pg_temp AS $$
    CLUSTER 'jobq'; RUN ON jobq.job_node(job_id);
$$;

CREATE FUNCTION jobq_snooze(job_id bigint, worker uuid, until timestamptz) RETURNS boolean
LANGUAGE plproxy SET search_path = pg_catalog, jobq, @extschema@, pg_temp AS $$
    CLUSTER 'jobq'; RUN ON jobq.job_node(job_id);
$$;

CREATE FUNCTION jobq_await_event(job_id bigint, worker uuid, event text, timeout interval DEFAULT NULL)
RETURNS text LANGUAGE plproxy SET search_path = pg_catalog, jobq, @extschema@, pg_temp AS $$
    CLUSTER 'jobq'; RUN ON jobq.job_node(job_id);
$$;

CREATE FUNCTION jobq._await_jobs(node integer, job_id bigint, worker uuid, jobs bigint[]) RETURNS text
LANGUAGE plproxy SET search_path = pg_catalog, jobq, @extschema@, pg_temp AS $$
    CLUSTER 'jobq'; RUN ON node;
    SELECT jobq_await_jobs(job_id, worker, jobs);
$$;
CREATE FUNCTION jobq_await_jobs(job_id bigint, worker uuid, jobs bigint[]) RETURNS text
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, @extschema@, pg_temp AS $$
DECLARE
    v_node integer := jobq.job_node(job_id);
BEGIN
    PERFORM jobq._same_node(v_node, jobs, 'jobs');
    RETURN jobq._await_jobs(v_node, job_id, worker, jobs);
END $$;

-- The jobs of several nodes: each node answers for its own, in the caller's order.
CREATE FUNCTION jobq._results(node integer, ids bigint[])
RETURNS TABLE (id bigint, kind text, state text, attempt integer, result jsonb, last_error jsonb)
LANGUAGE plproxy SET search_path = pg_catalog, jobq, @extschema@, pg_temp AS $$
    CLUSTER 'jobq'; RUN ON node;
    SELECT * FROM jobq_results(ids);
$$;
CREATE FUNCTION jobq_results(ids bigint[])
RETURNS TABLE (id bigint, kind text, state text, attempt integer, result jsonb, last_error jsonb)
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, @extschema@, pg_temp AS $$
BEGIN
    IF ids IS NULL OR cardinality(ids) > 10000 THEN
        -- The node's own refusal (22004, 22023), from one node.
        RETURN QUERY SELECT * FROM jobq._results(0, ids);
        RETURN;
    END IF;
    RETURN QUERY
    SELECT r.* FROM (SELECT DISTINCT jobq.job_node(i) AS node FROM unnest(ids) i WHERE i IS NOT NULL) n
      CROSS JOIN LATERAL jobq._results(n.node, ARRAY(SELECT i FROM unnest(ids) i WHERE jobq.job_node(i) = n.node)) r
     ORDER BY array_position(ids, r.id);
END $$;

-- An event is emitted on every node (a job awaiting it may be on any): the sum of the jobs
-- each woke. The first emit wins on each node, so a retried emit changes nothing.
CREATE FUNCTION jobq._emit_event(name text, payload jsonb) RETURNS SETOF integer
LANGUAGE plproxy SET search_path = pg_catalog, jobq, @extschema@, pg_temp AS $$
    CLUSTER 'jobq'; RUN ON ALL;
    SELECT jobq_emit_event(name, payload);
$$;
CREATE FUNCTION jobq_emit_event(name text, payload jsonb DEFAULT NULL) RETURNS integer
LANGUAGE sql SET search_path = pg_catalog, jobq, @extschema@, pg_temp AS $$
    SELECT coalesce(sum(n), 0)::integer FROM jobq._emit_event(name, payload) n
$$;

-- jobq_stop_checkouts (a node's src/sql/workers.sql) on every node, as jobq_unregister_worker:
-- a waiting checkout of the worker may be on any of them. JQ001 only when no node knew it.
CREATE FUNCTION jobq._stop_checkouts(node integer, worker uuid)
RETURNS integer LANGUAGE plproxy SET search_path = pg_catalog, jobq, @extschema@, pg_temp AS $$
    CLUSTER 'jobq'; RUN ON node;
    SELECT 1 AS _stop_checkouts FROM jobq_stop_checkouts(worker);
$$;
CREATE FUNCTION jobq_stop_checkouts(worker uuid) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, @extschema@, pg_temp AS $$
DECLARE
    v_known    boolean := false;
    v_unknown  text;
    n          integer;
BEGIN
    FOR n IN 0 .. jobq.nodes() - 1 LOOP
        BEGIN
            PERFORM jobq._stop_checkouts(n, worker);
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
END $$;

-- Whether `worker` stops checking out on node `node` (jobq_stop_checkouts): the waiting
-- checkout of several nodes below asks it when a node's wait slice returned nothing.
CREATE FUNCTION jobq._stopping(node integer, worker uuid)
RETURNS boolean LANGUAGE plproxy SET search_path = pg_catalog, jobq, @extschema@, pg_temp AS $$
    CLUSTER 'jobq'; RUN ON node;
    SELECT EXISTS (SELECT 1 FROM jobq.workers w WHERE w.id = worker AND w.stopping_at IS NOT NULL) AS _stopping;
$$;
-- Checkout of several nodes with `wait` (jobq_proxy--0.2.0.sql): it ends when the worker
-- stops checking out, rather than asking the nodes again until `wait` runs out.
CREATE OR REPLACE FUNCTION jobq_checkout(worker uuid, queues text[] DEFAULT NULL, max_jobs integer DEFAULT 1,
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
            -- A worker that stops checking out (jobq_stop_checkouts) is told so by every node:
            -- the slice ended at once, and no sweep would claim anything either.
            EXIT WHEN v_got = 0 AND jobq._stopping(n, worker);
        EXCEPTION WHEN internal_error THEN
            IF NOT jobq._unreachable(SQLSTATE, SQLERRM) THEN RAISE; END IF;
            PERFORM pg_sleep(extract(epoch FROM v_slice));
        END;
        EXIT WHEN v_left < max_jobs OR clock_timestamp() >= v_until;
    END LOOP;
END $$;

-- Privileges: as on a node (the contract, Privileges).
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
GRANT EXECUTE ON FUNCTION
    jobq_results(bigint[]),
    jobq._results(integer, bigint[])
TO jobq_reader;
GRANT EXECUTE ON FUNCTION
    jobq_enqueue(text, jsonb, text, integer, timestamptz, integer, text, text, text, text, integer, text, bigint[], text),
    jobq._enqueue(integer, text, jsonb, text, integer, timestamptz, integer, text, text, text, text, integer, text, bigint[], text),
    jobq._same_node(integer, bigint[], text),
    jobq_emit_event(text, jsonb),
    jobq._emit_event(text, jsonb),
    jobq_enqueue_graph(jsonb),
    jobq._enqueue_graph(integer, jsonb)
TO jobq_producer;
GRANT EXECUTE ON FUNCTION
    jobq_checkpoint(bigint, uuid, text, jsonb),
    jobq_snooze(bigint, uuid, timestamptz),
    jobq_await_event(bigint, uuid, text, interval),
    jobq_await_jobs(bigint, uuid, bigint[]),
    jobq._await_jobs(integer, bigint, uuid, bigint[]),
    jobq_stop_checkouts(uuid),
    jobq._stop_checkouts(integer, uuid),
    jobq._stopping(integer, uuid)
TO jobq_worker;
