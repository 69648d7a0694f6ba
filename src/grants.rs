//! Queues granted per role, as the fast paths see them (src/sql/grants.sql has the rule, the
//! grants and every check). `jobq_enqueue`, `jobq_checkout` and `jobq_complete` do their common
//! case in Rust, and so they do for a limited role whose call stays inside its grants: an
//! enqueue into a queue it holds as a producer, a checkout of queues it names and holds as a
//! worker, a completion of a job of such a queue. Any other call of a limited role is handed,
//! before anything changed, to the SQL, which refuses it (42501) or serves it (a checkout of
//! every queue). What each fast call pays where no grant was ever made: the table's lock and
//! its size (no page); else one probe of its primary key for the caller
//! (bench/instructions.sh measures both, rows jobq and jobq_tenant).
use crate::rows::{attr, column, each_by_pk, text};
use pgrx::pg_sys;

/// The patterns the caller may use at `privilege` (`b"reader"`, `b"producer"` or `b"worker"`) or a stronger
/// one, as `jobq._limits` reads them: None when the caller is not limited, and None where
/// jobq.queue_grants does not exist (an older release's SQL under this library, which has no
/// grants). The caller is the role the session set (SET ROLE) and the role it logged in as:
/// each may limit it, and a name must then be covered by both. `snapshot`: the call's.
pub unsafe fn limits(snapshot: pg_sys::Snapshot, privilege: &[u8]) -> Option<Vec<Vec<u8>>> {
    let (set, login) = (pg_sys::GetOuterUserId(), pg_sys::GetSessionUserId());
    with_grants(|rel| {
        let mine = limits_of(rel, set, snapshot, privilege);
        match (mine, if login == set { None } else { limits_of(rel, login, snapshot, privilege) }) {
            (Some(a), Some(b)) => Some(intersect(&a, &b)),
            (a, b) => a.or(b),
        }
    })
    .flatten()
}

/// Whether `role` is limited to some queues (it holds a grant and does not act for all), in
/// the calling statement's snapshot. For src/privileges.rs, where a session set a role.
pub unsafe fn is_limited(role: pg_sys::Oid) -> bool {
    // The calling statement's snapshot (every caller runs inside one).
    let snapshot = if pg_sys::ActiveSnapshotSet() { pg_sys::GetActiveSnapshot() } else { pg_sys::GetTransactionSnapshot() };
    with_grants(|rel| limits_of(rel, role, snapshot, b"reader").is_some()).unwrap_or(false)
}

/// `f` of jobq.queue_grants, opened; None, without calling it, where the table does not exist
/// (an older release's SQL under this library) or never held a grant (no page: no index to
/// descend, the common case).
unsafe fn with_grants<T>(f: impl FnOnce(pg_sys::Relation) -> T) -> Option<T> {
    let nsp = crate::relids::schema(true);
    let table = crate::relids::relation(nsp, c"queue_grants");
    if nsp == pg_sys::InvalidOid || table == pg_sys::InvalidOid {
        return None;
    }
    let rel = pg_sys::table_open(table, pg_sys::AccessShareLock as i32);
    let out = (pg_sys::RelationGetNumberOfBlocksInFork(rel, pg_sys::ForkNumber::MAIN_FORKNUM) > 0).then(|| f(rel));
    pg_sys::table_close(rel, pg_sys::NoLock as i32);
    out
}

/// One role's patterns, as `jobq._limits_of` reads them: None when it holds no grant, or is a
/// member of `jobq_admin` or of the role jobq's functions run as (superusers are members of
/// every role). A table not as expected: limited, with no pattern (every call is the SQL's).
unsafe fn limits_of(rel: pg_sys::Relation, role: pg_sys::Oid, snapshot: pg_sys::Snapshot, privilege: &[u8]) -> Option<Vec<Vec<u8>>> {
    let Some(rows) = grants_of(rel, role, snapshot) else { return Some(Vec::new()) };
    if rows.is_empty() || crate::privileges::acts_for_all(role) {
        return None;
    }
    let strong_enough: &[&[u8]] = match privilege {
        b"reader" => &[b"reader", b"producer", b"worker"],
        b"producer" => &[b"producer", b"worker"],
        _ => &[b"worker"],
    };
    Some(rows.into_iter().filter(|(p, _)| strong_enough.contains(&p.as_slice())).map(|(_, pattern)| pattern).collect())
}

/// The names covered by both `a` and `b`, as patterns: of two that overlap, the narrower one
/// (as `jobq._limits` intersects them).
fn intersect(a: &[Vec<u8>], b: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let mut both = Vec::new();
    for x in a {
        for y in b {
            let narrower = if covers(std::slice::from_ref(y), x) {
                x
            } else if covers(std::slice::from_ref(x), y) {
                y
            } else {
                continue;
            };
            if !both.contains(narrower) {
                both.push(narrower.clone());
            }
        }
    }
    both
}

/// The (privilege, pattern) of every grant of `role`, through the primary key (role first).
/// None when the table's columns are not the expected ones.
unsafe fn grants_of(rel: pg_sys::Relation, role: pg_sys::Oid, snapshot: pg_sys::Snapshot) -> Option<Vec<(Vec<u8>, Vec<u8>)>> {
    let desc = (*rel).rd_att;
    let (privilege, pattern) = (column(desc, "privilege")? as i32 + 1, column(desc, "pattern")? as i32 + 1);
    let mut rows = Vec::new();
    each_by_pk(rel, 1, pg_sys::F_OIDEQ, pg_sys::Datum::from(role), snapshot, |t| {
        let get = |attno| attr(t, desc, attno).map(|d| text(d).to_vec()).unwrap_or_default();
        rows.push((get(privilege), get(pattern)));
        true
    });
    Some(rows)
}

/// Whether `name` is covered by one of `patterns`, as `jobq._sees` says: equal to one, or
/// starting with the prefix of one that ends in `*`.
pub fn covers(patterns: &[Vec<u8>], name: &[u8]) -> bool {
    patterns.iter().any(|p| match p.strip_suffix(b"*") {
        Some(prefix) => name.starts_with(prefix),
        None => p.as_slice() == name,
    })
}
