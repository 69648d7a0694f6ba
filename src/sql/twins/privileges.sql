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

-- The caller is the worker's role (unless a login limited to some queues set it: a set role
-- never widens a limited login, src/privileges.rs), a member of jobq_admin, or a member of the
-- role these functions run as (the installing role); superusers are members of every role.
CREATE FUNCTION jobq._may_act_for(owner oid) RETURNS boolean
LANGUAGE plpgsql STRICT STABLE PARALLEL SAFE AS $$
DECLARE
    v_caller oid := jobq._caller();
    v_login  oid;
BEGIN
    IF owner = 0 OR (to_regrole('jobq_admin') IS NOT NULL AND pg_has_role(v_caller, 'jobq_admin', 'MEMBER'))
       OR pg_has_role(v_caller, current_user, 'MEMBER') THEN
        RETURN true;
    ELSIF v_caller IS DISTINCT FROM owner THEN
        RETURN false;
    ELSIF pg_catalog.current_setting('role') = 'none' THEN
        RETURN true;  -- no role set: the caller is the login
    END IF;
    v_login := to_regrole(quote_ident(session_user::text))::oid;
    RETURN v_login = v_caller OR jobq._limits_of(v_login, 'reader') IS NULL;
END $$;
