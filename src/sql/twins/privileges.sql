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
