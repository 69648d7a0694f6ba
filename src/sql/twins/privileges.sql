-- Twins of src/privileges.rs: who is calling, and whether it may act for a worker.
-- Inside a SECURITY DEFINER function current_user is the owner; the caller is the session's
-- role as SET ROLE last set it (the `role` setting), else the session's user.
CREATE FUNCTION jobq._caller() RETURNS oid
LANGUAGE sql STRICT STABLE PARALLEL SAFE SET search_path = pg_catalog, jobq, pg_temp AS $$
    SELECT r.oid FROM pg_roles r
     WHERE r.rolname = CASE WHEN current_setting('role') = 'none' THEN session_user
                            ELSE current_setting('role') END
$$;

-- The caller is the worker's role, a member of jobq_admin, or a member of the role these
-- functions run as (the installing role); superusers are members of every role.
CREATE FUNCTION jobq._may_act_for(owner oid) RETURNS boolean
LANGUAGE sql STRICT STABLE PARALLEL SAFE SET search_path = pg_catalog, jobq, pg_temp AS $$
    SELECT c.oid = owner OR owner = 0
        OR (EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'jobq_admin') AND pg_has_role(c.oid, 'jobq_admin', 'MEMBER'))
        OR pg_has_role(c.oid, current_user, 'MEMBER')
      FROM (SELECT jobq._caller() AS oid) c
$$;
