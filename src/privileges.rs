//! Who is calling: the one rule every function that names a worker uses to decide whether
//! the caller may act for that worker's role.
//!
//! Every `jobq_*` function is `SECURITY DEFINER`, so inside it `current_user` is the
//! extension's owner, not the caller. PostgreSQL keeps the caller's role as the "outer" user
//! (`GetOuterUserId()`): the session's role as `SET ROLE` last set it, which a definer function
//! does not change and a user cannot forge (only `SET ROLE` to a role one is a member of, or
//! `SET SESSION AUTHORIZATION` as a superuser, change it). A worker belongs to the outer user of
//! the session that registered it (`jobq.workers.owner`), and a call naming that worker is
//! allowed for that role, for members of `jobq_admin`, and for the extension's owner and
//! superusers (both members of every role, for `is_member_of_role`). A session whose login role
//! is limited to some queues (src/grants.rs) and that set another role acts for no worker but
//! through `jobq_admin`: setting a role never widens a limited login, and a worker owned by the
//! set role may be another tenant's.
use pgrx::prelude::*;

/// Whether `role` may act for anyone: a member of `jobq_admin`, or of the role the function runs
/// as (inside a `SECURITY DEFINER` function of jobq: the extension's owner; superusers are
/// members of every role). Such a role acts for any worker and is limited to no queue
/// (src/grants.rs).
pub unsafe fn acts_for_all(role: pg_sys::Oid) -> bool {
    let admin = pg_sys::get_role_oid(c"jobq_admin".as_ptr(), true);
    (admin != pg_sys::InvalidOid && pg_sys::is_member_of_role(role, admin)) || pg_sys::is_member_of_role(role, pg_sys::GetUserId())
}

#[pg_schema]
pub mod jobq {
    use pgrx::prelude::*;

    /// The calling role (see the module's comment), for `jobq.workers.owner`.
    #[pg_extern(stable, parallel_safe, name = "_caller")]
    pub fn caller() -> pg_sys::Oid {
        unsafe { pg_sys::GetOuterUserId() }
    }

    /// True when the calling role may act for a worker registered by `owner`: it is that
    /// role (unless a limited login set it: see the module's comment), a member of
    /// `jobq_admin`, or a member of the role the function runs as (inside a `SECURITY DEFINER`
    /// function of jobq: the extension's owner). Superusers always may.
    #[pg_extern(stable, parallel_safe, name = "_may_act_for")]
    pub fn may_act_for(owner: pg_sys::Oid) -> bool {
        unsafe {
            let caller = pg_sys::GetOuterUserId();
            // No owner: a worker registered before jobq 0.2.0 (kept by the upgrade from 0.1.0,
            // where anyone could act for any worker), so that the workers running across the
            // upgrade finish their jobs; such a row is gone once its worker registers anew.
            if owner == pg_sys::InvalidOid {
                return true;
            }
            if caller == owner {
                let login = pg_sys::GetSessionUserId();
                if login == caller || !crate::grants::is_limited(login) {
                    return true;
                }
            }
            super::acts_for_all(caller)
        }
    }
}
