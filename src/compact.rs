//! Compaction of the hot tables under a held xmin horizon (the long-transaction issue).
//!
//! While a transaction elsewhere holds the horizon, every version a job leaves in
//! `jobq.live_jobs` and `jobq.ready` (and a keyed attempt in `jobq.slots`) stays, and vacuum
//! cannot remove it. `jobq._compact` (src/sql/compact.sql), run by the background worker, empties
//! the three tables with TRUNCATE, which removes their dead versions whatever snapshot is held,
//! and writes their live rows back, all in one short transaction under an ACCESS EXCLUSIVE lock.
//! Every reader of jobq.slots has locked jobq.ready or jobq.live_jobs before it in the same
//! transaction, so locking those two is enough to keep a compaction off. This file holds what
//! makes that safe for everyone else:
//!
//! - TRUNCATE is not MVCC-safe: a snapshot taken before it commits sees the tables empty.
//!   `jobq._note_compaction()` records the compacting transaction's id, per database, in shared
//!   memory, before the truncation.
//! - `jobq._hold_hot_tables()`, the first statement of every SQL function that must find a job
//!   row it was told about (complete, fail, cancel, heartbeat, unregister, enqueue's replace),
//!   locks both tables: it waits for a compaction in progress, and no compaction starts before
//!   the caller's transaction ends. Under READ COMMITTED the function's next statement takes a
//!   new snapshot, after the compaction (PostgreSQL takes a PL/pgSQL statement's snapshot after
//!   its locks anyway: tests/compact.rs passes without the call there). Under REPEATABLE READ or
//!   SERIALIZABLE the snapshot is the transaction's: when the last compaction had not finished
//!   before it was taken, the call raises 40001, and the client retries its transaction (SPEC
//!   allows 40001 there). This is what the call is for.
//! - The Rust fast paths (src/checkout.rs, src/complete.rs) serve READ COMMITTED only, and lock
//!   the tables before they take their snapshot.
//!
//! Without the preload there is no shared memory: nothing is recorded, and `jobq._compact`
//! refuses to run.
use pgrx::prelude::*;
use pgrx::{pg_shmem_init, PGRXSharedMemory, PgLwLock};
use std::sync::atomic::{AtomicBool, Ordering};

const DATABASES: usize = 1024;

#[derive(Copy, Clone)]
struct Last {
    db: u32,  // 0: free
    xid: u64, // the full transaction id of the database's last compaction (committed or not)
}

#[derive(Copy, Clone)]
struct Compactions {
    last: [Last; DATABASES],
}
unsafe impl PGRXSharedMemory for Compactions {}

static COMPACTIONS: PgLwLock<Compactions> = unsafe { PgLwLock::new(c"jobq_compactions") };
static ENABLED: AtomicBool = AtomicBool::new(false);

/// Called from _PG_init while preloading.
pub fn init() {
    pg_shmem_init!(COMPACTIONS = Compactions { last: [Last { db: 0, xid: 0 }; DATABASES] });
    ENABLED.store(true, Ordering::Relaxed);
}

/// The hot tables' oids: (jobq.live_jobs, jobq.ready).
unsafe fn hot_tables() -> (pg_sys::Oid, pg_sys::Oid) {
    let nsp = pg_sys::get_namespace_oid(c"jobq".as_ptr(), false);
    (pg_sys::get_relname_relid(c"live_jobs".as_ptr(), nsp), pg_sys::get_relname_relid(c"ready".as_ptr(), nsp))
}

#[pg_schema]
pub mod jobq {
    use super::*;

    /// Records the calling transaction as this database's last compaction; false (nothing
    /// recorded) without the preload or with more than 1,024 databases recorded. Called by
    /// `jobq._compact` under its ACCESS EXCLUSIVE lock, before it truncates: whoever locks the
    /// tables after it reads this value.
    #[pg_extern(volatile, name = "_note_compaction")]
    pub fn note_compaction() -> bool {
        if !ENABLED.load(Ordering::Relaxed) {
            return false;
        }
        let db = crate::my_db();
        let xid = unsafe { pg_sys::GetTopFullTransactionId() }.value;
        let mut all = COMPACTIONS.exclusive();
        let slot = match all.last.iter().position(|l| l.db == db) {
            Some(s) => s,
            None => match all.last.iter().position(|l| l.db == 0) {
                Some(s) => s,
                None => return false,
            },
        };
        all.last[slot] = Last { db, xid };
        true
    }

    /// Locks jobq.live_jobs and jobq.ready (ACCESS SHARE, until the transaction ends), so that
    /// what the caller reads next is not a compaction's empty tables; under REPEATABLE READ or
    /// SERIALIZABLE, raises 40001 when the last compaction had not finished before this
    /// transaction's snapshot was taken (the module comment).
    #[pg_extern(volatile, name = "_hold_hot_tables")]
    pub fn hold_hot_tables() {
        unsafe {
            // In checkout's order, and the compaction's: jobq.ready, then jobq.live_jobs.
            let (live, ready) = hot_tables();
            pg_sys::LockRelationOid(ready, pg_sys::AccessShareLock as pg_sys::LOCKMODE);
            pg_sys::LockRelationOid(live, pg_sys::AccessShareLock as pg_sys::LOCKMODE);
            if pg_sys::XactIsoLevel < pg_sys::XACT_REPEATABLE_READ as i32 || !ENABLED.load(Ordering::Relaxed) {
                return;
            }
            let db = crate::my_db();
            let Some(xid) = COMPACTIONS.share().last.iter().find(|l| l.db == db).map(|l| l.xid) else { return };
            // A transaction id more than 2^31 behind the next one is older than any snapshot
            // (and its 32-bit form would compare as in the future).
            let next = pg_sys::ReadNextFullTransactionId().value;
            if next.saturating_sub(xid) >= 1 << 31 {
                return;
            }
            if pg_sys::XidInMVCCSnapshot(pg_sys::TransactionId::from(xid as u32), pg_sys::GetTransactionSnapshot()) {
                ereport!(
                    ERROR,
                    PgSqlErrorCode::ERRCODE_T_R_SERIALIZATION_FAILURE,
                    "jobq: could not serialize access: the queue's tables were compacted after this transaction's snapshot was taken",
                    "Retry the transaction."
                );
            }
        }
    }
}
