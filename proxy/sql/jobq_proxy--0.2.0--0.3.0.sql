-- jobq_proxy 0.2.0 -> 0.3.0: jobq 0.3's workflows and durable jobs through the proxy (SPEC,
-- "Workflows and durable jobs" and "Scale-out"). A fresh CREATE EXTENSION jobq_proxy installs
-- 0.2.0 and runs this script, so a fresh install and an upgraded one are the same.
--   jobq_emit_event        -> every node, the sum of what each woke
--   a job's calls          -> the node its id names (checkpoint, snooze, awaits)
--   jobq_results           -> each id's node, the answers in the caller's order
--   depends_on, awaits     -> must name jobs of the job's own node, else 0A000
\echo Use "CREATE EXTENSION jobq_proxy" or "ALTER EXTENSION jobq_proxy UPDATE" to load this file. \quit

-- What a checkout returns gains the node's two new columns, in the node's order.
ALTER TYPE jobq.job ADD ATTRIBUTE depends_on bigint[], ADD ATTRIBUTE checkpoints jsonb;

-- Refuses `ids` that name jobs of another node than `node` (SPEC: 0A000): a dependency or an
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

-- A graph in one call (beyond SPEC): on the node of its queues, which must be one node, as
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

-- Privileges: as on a node (SPEC, Privileges).
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
    jobq._await_jobs(integer, bigint, uuid, bigint[])
TO jobq_worker;
