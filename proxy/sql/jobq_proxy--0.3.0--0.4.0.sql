-- jobq_proxy 0.3.0 -> 0.4.0: jobq 0.5's queue grants through the proxy (the contract, "Tenants"
-- and "Scale-out"). A fresh CREATE EXTENSION jobq_proxy installs 0.2.0 and runs the scripts
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
