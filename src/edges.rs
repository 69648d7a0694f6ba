//! What a transaction that finishes a job must know of `jobq.edges` (src/sql/workflows.sql)
//! beyond its own snapshot: the edges that dependents' enqueues and awaits committed while it
//! ran. Such an enqueue locks the job's row `FOR KEY SHARE`, so the finishing delete waits
//! for it to commit; what happens next depends on the isolation level.
//!
//! - READ COMMITTED: the edges are read in a snapshot newer than that commit. The completion
//!   without a plan (src/complete.rs) looks with [`awaited`]; the SQL's `jobq._settle` reads
//!   them in a new statement's snapshot.
//! - REPEATABLE READ and SERIALIZABLE: the transaction's snapshot predates the edge and can
//!   never see it, and the delete succeeds (a lock, unlike an update, is no serialization
//!   conflict). `jobq._settle` asks [`jobq::refuse_unseen_edges`] first, which raises `40001`
//!   when a dependent's edge is in the newest snapshot and not in the transaction's; the
//!   client retries, as it does for any `40001`, and the retry sees the edge.
//!
//! A database where no edge was ever written pays nothing for this on a completion: every
//! statement that inserts edges notes its database in shared memory (the trigger
//! `edges_written`, whatever inserts them: a dependent's enqueue, an await, a restore's COPY),
//! and a completion that found `jobq.edges` without a page notes the database as having none
//! (src/written.rs).
use crate::written::{note, Table};
use pgrx::pg_sys;
use pgrx::prelude::*;

/// jobq.edges, opened with `lock`, and its `parent` and `child` columns (1-based); None when
/// there is no such table (a session across `DROP EXTENSION`).
unsafe fn open(nsp: pg_sys::Oid, lock: u32) -> Option<(pg_sys::Relation, i16, i16)> {
    let id = crate::relids::relation(nsp, c"edges");
    if id == pg_sys::InvalidOid {
        return None;
    }
    let rel = pg_sys::table_open(id, lock as i32);
    let desc = (*rel).rd_att;
    match (
        crate::rows::column(desc, "parent"),
        crate::rows::column(desc, "child"),
    ) {
        (Some(p), Some(c)) => Some((rel, p as i16 + 1, c as i16 + 1)),
        _ => {
            pg_sys::table_close(rel, lock as i32);
            None
        }
    }
}

/// Whether a job depends on or awaits job `job` (an edge names it as parent), so that
/// `jobq._settle` must tell it. Looked up in the newest snapshot; not at all in a database
/// where no edge was ever written (the module comment).
pub unsafe fn awaited(nsp: pg_sys::Oid, job: i64) -> bool {
    crate::written::look(
        Table::Edges,
        || open(nsp, pg_sys::AccessShareLock).map(|(edges, parent, _)| (edges, parent)),
        |edges, parent| {
            let latest = pg_sys::RegisterSnapshot(pg_sys::GetLatestSnapshot());
            let edge = crate::rows::fetch(edges, parent, pg_sys::F_INT8EQ, pg_sys::Datum::from(job), latest);
            pg_sys::UnregisterSnapshot(latest);
            edge.is_some()
        },
    )
}

/// The children of `parent`'s edges in `snapshot`, through the primary key (parent, child).
unsafe fn children(
    edges: pg_sys::Relation,
    parent_col: i16,
    child_col: i16,
    parent: i64,
    snapshot: pg_sys::Snapshot,
) -> Vec<i64> {
    pg_sys::RelationGetIndexList(edges); // fills rd_pkindex
    let mut skey: pg_sys::ScanKeyData = std::mem::zeroed();
    pg_sys::ScanKeyInit(
        &mut skey,
        parent_col,
        pg_sys::BTEqualStrategyNumber as u16,
        pg_sys::Oid::from(pg_sys::F_INT8EQ),
        pg_sys::Datum::from(parent),
    );
    let scan = pg_sys::systable_beginscan(edges, (*edges).rd_pkindex, true, snapshot, 1, &mut skey);
    let mut found = Vec::new();
    loop {
        let t = pg_sys::systable_getnext(scan);
        if t.is_null() {
            break;
        }
        if let Some(d) = crate::rows::attr(t, (*edges).rd_att, child_col as i32) {
            found.push(d.value() as i64);
        }
    }
    pg_sys::systable_endscan(scan);
    found
}

#[pg_schema]
pub mod jobq {
    use super::*;

    /// Notes that this database's jobq.edges has rows (called by the trigger `edges_written`,
    /// src/sql/workflows.sql, after each statement that inserts edges, before they commit).
    #[pg_extern(volatile, name = "_note_edges")]
    pub fn note_edges() {
        note(crate::my_db(), Table::Edges, true);
    }

    /// Nothing: the extension refuses a completion that cannot see a dependent's edge
    /// (`_refuse_unseen_edges`), so no pass has anything to settle after it. The SQL edition,
    /// which cannot read the newest snapshot, notes such completions and settles their
    /// dependents here, in the next reap pass (src/sql/twins/edges.sql).
    #[pg_extern(volatile, name = "_settle_unseen")]
    pub fn settle_unseen() {}

    /// Under REPEATABLE READ or SERIALIZABLE, raises 40001 when an edge naming one of
    /// `parents` (a dependent enqueued, or an await) committed after this transaction's
    /// snapshot was taken: the finishing transaction could not tell that child (the module
    /// comment). Nothing under READ COMMITTED.
    #[pg_extern(volatile, name = "_refuse_unseen_edges")]
    pub fn refuse_unseen_edges(parents: Vec<i64>) {
        unsafe {
            if pg_sys::XactIsoLevel < pg_sys::XACT_REPEATABLE_READ as i32 {
                return;
            }
            let nsp = crate::relids::schema(false);
            let Some((edges, parent_col, child_col)) = open(nsp, pg_sys::AccessShareLock) else {
                return;
            };
            let mine = pg_sys::GetTransactionSnapshot();
            let latest = pg_sys::RegisterSnapshot(pg_sys::GetLatestSnapshot());
            let unseen = parents.iter().find_map(|&p| {
                let seen = children(edges, parent_col, child_col, p, mine);
                children(edges, parent_col, child_col, p, latest)
                    .into_iter()
                    .find(|c| !seen.contains(c))
                    .map(|c| (p, c))
            });
            pg_sys::UnregisterSnapshot(latest);
            pg_sys::table_close(edges, pg_sys::NoLock as i32);
            if let Some((parent, child)) = unseen {
                ereport!(
                    ERROR,
                    PgSqlErrorCode::ERRCODE_T_R_SERIALIZATION_FAILURE,
                    format!("jobq: could not serialize access: job {child} was made to depend on job {parent} after this transaction's snapshot was taken"),
                    "Retry the transaction."
                );
            }
        }
    }
}
