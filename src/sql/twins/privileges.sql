-- Twins of src/privileges.rs: who is calling, and whether it may act for a worker.
-- Inside a SECURITY DEFINER function current_user is the owner; the caller is the session's
-- role as SET ROLE last set it (the `role` setting), else the session's user.
CREATE FUNCTION jobq._caller() RETURNS oid
LANGUAGE plpgsql STRICT STABLE PARALLEL SAFE SET search_path = pg_catalog, jobq, pg_temp AS $$
BEGIN
    RETURN to_regrole(quote_ident(CASE WHEN current_setting('role') = 'none' THEN session_user
                                       ELSE current_setting('role') END))::oid;
END $$;

-- The caller is the worker's role, a member of jobq_admin, or a member of the role these
-- functions run as (the installing role); superusers are members of every role.
CREATE FUNCTION jobq._may_act_for(owner oid) RETURNS boolean
LANGUAGE plpgsql STRICT STABLE PARALLEL SAFE SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_caller oid := jobq._caller();
BEGIN
    IF v_caller = owner OR owner = 0 THEN
        RETURN true;
    END IF;
    RETURN (to_regrole('jobq_admin') IS NOT NULL AND pg_has_role(v_caller, 'jobq_admin', 'MEMBER'))
        OR pg_has_role(v_caller, current_user, 'MEMBER');
END $$;
