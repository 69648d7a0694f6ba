//! Queues granted per role, as the fast paths see them (src/sql/grants.sql has the rule, the
//! grants and every check). `jobq_enqueue`, `jobq_checkout` and `jobq_complete` do their common
//! case in Rust; a call by a limited role is handed, before anything changed, to their SQL,
//! which checks its queues. What each fast call pays for it: the table's lock and its size
//! (no page where no grant was ever made), else one probe of its primary key for the caller
//! (bench/instructions.sh measures it with the rest of the call).
use crate::rows::fetch;
use pgrx::pg_sys;

/// Whether the calling role is limited to some queues: it holds a queue grant and is neither
/// a member of `jobq_admin` nor of the role jobq's functions run as (superusers are members of
/// every role), as `jobq._patterns` decides. False where jobq.queue_grants does not exist (an
/// older release's SQL under this library), which has no grants. `snapshot`: the call's.
pub unsafe fn limited(snapshot: pg_sys::Snapshot) -> bool {
    let nsp = pg_sys::get_namespace_oid(c"jobq".as_ptr(), true);
    let table = pg_sys::get_relname_relid(c"queue_grants".as_ptr(), nsp);
    if nsp == pg_sys::InvalidOid || table == pg_sys::InvalidOid {
        return false;
    }
    let caller = pg_sys::GetOuterUserId();
    let rel = pg_sys::table_open(table, pg_sys::AccessShareLock as i32);
    // A table that never held a grant has no page: no index to descend (the common case).
    let empty = pg_sys::RelationGetNumberOfBlocksInFork(rel, pg_sys::ForkNumber::MAIN_FORKNUM) == 0;
    let holds = if empty { None } else { fetch(rel, 1, pg_sys::F_OIDEQ, pg_sys::Datum::from(caller), snapshot) };
    pg_sys::table_close(rel, pg_sys::NoLock as i32);
    if holds.is_none() {
        return false;
    }
    let admin = pg_sys::get_role_oid(c"jobq_admin".as_ptr(), true);
    !((admin != pg_sys::InvalidOid && pg_sys::is_member_of_role(caller, admin))
        || pg_sys::is_member_of_role(caller, pg_sys::GetUserId()))
}
