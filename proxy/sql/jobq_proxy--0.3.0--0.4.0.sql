-- jobq_proxy 0.3.0 -> 0.4.0: jobq 0.5's queue grants and fair checkout through the proxy (the
-- contract, "Tenants" and "Scale-out"). Nodes and proxy are updated together: a checkout returns
-- jobq 0.5's jobq.job (its fairness_key), which PL/Proxy matches column for column. A fresh CREATE EXTENSION jobq_proxy installs 0.2.0 and runs the scripts
-- after it, so a fresh install and an upgraded one are the same.
--   jobq_grant_queues, jobq_revoke_queues -> every node: a role is limited alike on each, and
--   every other call, routed as before, is checked by the node that serves it.
-- Each node applies the call in its own transaction (PL/Proxy has none across nodes): a node
-- that is down fails the call, naming it, and the others have applied it; the call is
-- idempotent, so it is run again once the node is back.
\echo Use "CREATE EXTENSION jobq_proxy" or "ALTER EXTENSION jobq_proxy UPDATE" to load this file. \quit

-- The role travels as its name (regrole's text form, quoted where it must be) and is read as a
-- regrole on each node, where the role must exist as on the proxy.
CREATE FUNCTION jobq._grant_queues(grantee text, privilege text, queues text[])
RETURNS SETOF void LANGUAGE plproxy SET search_path = pg_catalog, jobq, @extschema@, pg_temp AS $$
    CLUSTER 'jobq'; RUN ON ALL;
    SELECT jobq_grant_queues(grantee::regrole, privilege, queues);
$$;

CREATE FUNCTION jobq._revoke_queues(grantee text, privilege text, queues text[])
RETURNS SETOF void LANGUAGE plproxy SET search_path = pg_catalog, jobq, @extschema@, pg_temp AS $$
    CLUSTER 'jobq'; RUN ON ALL;
    SELECT jobq_revoke_queues(grantee::regrole, privilege, queues);
$$;

CREATE FUNCTION jobq_grant_queues(role regrole, privilege text, queues text[]) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, @extschema@, pg_temp AS $$
BEGIN
    PERFORM count(*) FROM jobq._grant_queues(jobq_grant_queues.role::text, privilege, queues);
END $$;

CREATE FUNCTION jobq_revoke_queues(role regrole, privilege text, queues text[]) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, jobq, @extschema@, pg_temp AS $$
BEGIN
    PERFORM count(*) FROM jobq._revoke_queues(jobq_revoke_queues.role::text, privilege, queues);
END $$;

-- Fair checkout: a job's fairness key goes to the queue's node with it, and is shown in
-- jobq.job; a key's weight is set on its queue's node, where its queue's jobs are.
ALTER TYPE jobq.job ADD ATTRIBUTE fairness_key text;

DROP FUNCTION jobq_enqueue(text, jsonb, text, integer, timestamptz, integer, text, text, text, text, integer, text, bigint[], text);
DROP FUNCTION jobq._enqueue(integer, text, jsonb, text, integer, timestamptz, integer, text, text, text, text, integer, text, bigint[], text);
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
    on_parent_failure text,
    fairness_key      text
) RETURNS bigint LANGUAGE plproxy SET search_path = pg_catalog, jobq, @extschema@, pg_temp AS $$
    CLUSTER 'jobq'; RUN ON node;
    SELECT jobq_enqueue(queue, payload, kind, priority, run_at, max_attempts, unique_key, unique_strategy,
                        on_conflict, concurrency_key, concurrency_limit, rate_key, depends_on, on_parent_failure,
                        fairness_key);
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
    on_parent_failure text        DEFAULT 'cancel',
    fairness_key      text        DEFAULT NULL
) RETURNS bigint LANGUAGE plpgsql SET search_path = pg_catalog, jobq, @extschema@, pg_temp AS $$
DECLARE
    v_node integer := jobq.queue_node(queue);
BEGIN
    PERFORM jobq._same_node(v_node, depends_on, 'depends_on');
    RETURN jobq._enqueue(v_node, queue, payload, kind, priority, run_at, max_attempts, unique_key,
                         unique_strategy, on_conflict, concurrency_key, concurrency_limit, rate_key,
                         depends_on, on_parent_failure, fairness_key);
END $$;

DROP FUNCTION jobq_enqueue_batch(text, jsonb[], text, integer, timestamptz, integer);
CREATE FUNCTION jobq_enqueue_batch(
    queue        text,
    payloads     jsonb[],
    kind         text        DEFAULT NULL,
    priority     integer     DEFAULT 0,
    run_at       timestamptz DEFAULT NULL,
    max_attempts integer     DEFAULT 25,
    fairness_key text        DEFAULT NULL
) RETURNS SETOF bigint LANGUAGE plproxy SET search_path = pg_catalog, jobq, @extschema@, pg_temp AS $$
    CLUSTER 'jobq'; RUN ON jobq.queue_node(queue);
$$;

CREATE FUNCTION jobq_set_fairness_weight(queue text, fairness_key text, weight integer)
RETURNS void LANGUAGE plproxy SET search_path = pg_catalog, jobq, @extschema@, pg_temp AS $$
    CLUSTER 'jobq'; RUN ON jobq.queue_node(queue);
$$;

REVOKE ALL ON FUNCTION
    jobq._enqueue(integer, text, jsonb, text, integer, timestamptz, integer, text, text, text, text, integer, text, bigint[], text, text),
    jobq_enqueue(text, jsonb, text, integer, timestamptz, integer, text, text, text, text, integer, text, bigint[], text, text),
    jobq_enqueue_batch(text, jsonb[], text, integer, timestamptz, integer, text),
    jobq_set_fairness_weight(text, text, integer)
FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
    jobq._enqueue(integer, text, jsonb, text, integer, timestamptz, integer, text, text, text, text, integer, text, bigint[], text, text),
    jobq_enqueue(text, jsonb, text, integer, timestamptz, integer, text, text, text, text, integer, text, bigint[], text, text),
    jobq_enqueue_batch(text, jsonb[], text, integer, timestamptz, integer, text)
TO jobq_producer;
GRANT EXECUTE ON FUNCTION jobq_set_fairness_weight(text, text, integer) TO jobq_admin;

-- Privileges: as on a node (the contract, Privileges).
REVOKE ALL ON FUNCTION
    jobq._grant_queues(text, text, text[]),
    jobq._revoke_queues(text, text, text[]),
    jobq_grant_queues(regrole, text, text[]),
    jobq_revoke_queues(regrole, text, text[])
FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
    jobq._grant_queues(text, text, text[]),
    jobq._revoke_queues(text, text, text[]),
    jobq_grant_queues(regrole, text, text[]),
    jobq_revoke_queues(regrole, text, text[])
TO jobq_admin;
