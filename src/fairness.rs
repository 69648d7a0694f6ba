//! Whether any queue of this database takes turns (a row of `jobq.fairness`, src/sql/fairness.sql),
//! for the fast path of checkout (src/checkout.rs), which hands every call to the SQL while one
//! does. A database that never wrote a turn skips the table (src/written.rs).
use crate::written::{look, note, Table};
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::ptr::null_mut;

/// Whether `jobq.fairness` has a row in `snapshot`.
pub unsafe fn any(nsp: pg_sys::Oid, snapshot: pg_sys::Snapshot) -> bool {
    look(
        Table::Fairness,
        || {
            let table = pg_sys::get_relname_relid(c"fairness".as_ptr(), nsp);
            // None: an older release's SQL under this library.
            (table != pg_sys::InvalidOid).then(|| (pg_sys::table_open(table, pg_sys::AccessShareLock as i32), ()))
        },
        |rel, ()| {
            let scan = pg_sys::systable_beginscan(rel, pg_sys::InvalidOid, false, snapshot, 0, null_mut());
            let row = !pg_sys::systable_getnext(scan).is_null();
            pg_sys::systable_endscan(scan);
            row
        },
    )
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
