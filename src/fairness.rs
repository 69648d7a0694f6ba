//! Whether any queue of this database takes turns (a row of `jobq.fairness`, src/sql/fairness.sql),
//! for the fast path of checkout (src/checkout.rs), which hands every call to the SQL while one
//! does. A database that never wrote a turn skips the table (src/written.rs).
use crate::written::{known, note, Known, Table};
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::ptr::null_mut;

/// Whether `jobq.fairness` has a row in `snapshot`.
pub unsafe fn any(nsp: pg_sys::Oid, snapshot: pg_sys::Snapshot) -> bool {
    let db = crate::my_db();
    let before = known(db, Table::Fairness);
    if before == Known::Empty {
        return false;
    }
    let table = pg_sys::get_relname_relid(c"fairness".as_ptr(), nsp);
    if table == pg_sys::InvalidOid {
        return false; // an older release's SQL under this library
    }
    let rel = pg_sys::table_open(table, pg_sys::AccessShareLock as i32);
    let pages = pg_sys::RelationGetNumberOfBlocksInFork(rel, pg_sys::ForkNumber::MAIN_FORKNUM) > 0;
    if !pages && before == Known::Nothing {
        note(db, Table::Fairness, false);
    }
    let found = pages && {
        let scan = pg_sys::systable_beginscan(rel, pg_sys::InvalidOid, false, snapshot, 0, null_mut());
        let row = !pg_sys::systable_getnext(scan).is_null();
        pg_sys::systable_endscan(scan);
        row
    };
    pg_sys::table_close(rel, pg_sys::NoLock as i32);
    found
}

#[pg_schema]
pub mod jobq {
    use super::*;

    /// Notes that this database's jobq.fairness has rows (called by the trigger
    /// `fairness_written`, src/sql/fairness.sql, after each statement that inserts some, before
    /// they commit).
    #[pg_extern(volatile, name = "_note_fairness")]
    pub fn note_fairness() {
        note(crate::my_db(), Table::Fairness, true);
    }
}
