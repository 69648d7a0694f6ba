//! Compaction of the hot tables under a held xmin horizon (a long transaction elsewhere:
//! docs/operations.md, "Long transactions elsewhere").
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
//!   locks both tables: it waits for a running compaction, and no compaction starts before
//!   the caller's transaction ends. Under READ COMMITTED the function's next statement takes a
//!   new snapshot, after the compaction (PostgreSQL takes a PL/pgSQL statement's snapshot after
//!   its locks anyway: tests/compact.rs passes without the call there). Under REPEATABLE READ or
//!   SERIALIZABLE the snapshot is the transaction's: when the last compaction had not finished
//!   before it was taken, the call raises 40001, and the client retries its transaction (the contract
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
    let nsp = crate::relids::schema(false);
    (crate::relids::relation(nsp, c"live_jobs"), crate::relids::relation(nsp, c"ready"))
}

/// Where database `db` records its compaction: its own slot, else a free one, else the slot of
/// another database whose last compaction `finished` says no snapshot can see as running any
/// more (that database's `jobq._hold_hot_tables` then finds no entry and raises no 40001, which
/// is right: every snapshot there already sees the compaction's tables). Slots are never freed
/// otherwise, so a cluster whose databases come and go (one per tenant or per test run) would
/// run out of them after 1,024 compacting databases.
fn slot_for(last: &[Last], db: u32, finished: impl Fn(u64) -> bool) -> Option<usize> {
    (last.iter().position(|l| l.db == db))
        .or_else(|| last.iter().position(|l| l.db == 0))
        .or_else(|| last.iter().position(|l| finished(l.xid)))
}

/// True when no snapshot, now or later, can see transaction `xid` as running: it is more than
/// 2^31 behind `next` (older than any snapshot), or it precedes `horizon`
/// (GetOldestNonRemovableTransactionId over every database), compared as PostgreSQL's
/// TransactionIdPrecedes compares (modulo 2^32; the permanent ids below 3 as plain numbers).
/// (A waiting checkout clears its backend's xmin while its statement's snapshots stay
/// registered, src/waits.rs, so the horizon does not cover them: harmless, since it runs only
/// under READ COMMITTED, where `_hold_hot_tables` makes no 40001 check.)
fn no_snapshot_sees_running(xid: u64, next: u64, horizon: u32) -> bool {
    let (a, b) = (xid as u32, horizon);
    let precedes = if a < 3 || b < 3 { a < b } else { (a.wrapping_sub(b) as i32) < 0 };
    next.saturating_sub(xid) >= 1 << 31 || precedes
}

#[pg_schema]
pub mod jobq {
    use super::*;

    /// Records the calling transaction as this database's last compaction; false (nothing
    /// recorded) without the preload; 53000 when 1,024 other databases' compactions may each
    /// still be running for some snapshot (`slot_for`). Called by `jobq._compact` under its
    /// ACCESS EXCLUSIVE lock, before it truncates: whoever locks the tables after it reads this
    /// value.
    #[pg_extern(volatile, name = "_note_compaction")]
    pub fn note_compaction() -> bool {
        if !ENABLED.load(Ordering::Relaxed) {
            return false;
        }
        let db = crate::my_db();
        let (xid, next, horizon) = unsafe {
            (
                pg_sys::GetTopFullTransactionId().value,
                pg_sys::ReadNextFullTransactionId().value,
                // The oldest xmin or xid of every backend of every database (and of replication
                // slots): no snapshot sees a transaction older than this as running.
                u32::from(pg_sys::GetOldestNonRemovableTransactionId(std::ptr::null_mut())),
            )
        };
        let mut all = COMPACTIONS.exclusive();
        let Some(slot) = slot_for(&all.last, db, |old| no_snapshot_sees_running(old, next, horizon)) else {
            drop(all);
            ereport!(
                ERROR,
                PgSqlErrorCode::ERRCODE_INSUFFICIENT_RESOURCES,
                "jobq: 1,024 other databases have compacted since the oldest snapshot still held began; this one cannot until it ends",
                "The background worker tries again; pg_stat_activity.backend_xmin shows the oldest snapshot."
            );
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
            if pg_sys::ReadNextFullTransactionId().value.saturating_sub(xid) >= 1 << 31 {
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

#[cfg(test)]
mod unit {
    use super::*;

    fn slots(dbs: &[(u32, u64)]) -> Vec<Last> {
        dbs.iter().map(|&(db, xid)| Last { db, xid }).collect()
    }

    #[test]
    fn a_database_keeps_its_slot_then_takes_a_free_one() {
        let last = slots(&[(7, 100), (0, 0), (9, 50)]);
        assert_eq!(slot_for(&last, 9, |_| true), Some(2));
        assert_eq!(slot_for(&last, 8, |_| true), Some(1));
    }

    #[test]
    fn when_every_slot_is_taken_only_a_compaction_no_snapshot_sees_running_gives_up_its_slot() {
        let last = slots(&[(7, 100), (8, 200), (9, 300)]);
        assert_eq!(slot_for(&last, 10, |_| false), None);
        assert_eq!(slot_for(&last, 10, |xid| xid < 250), Some(0));
        assert_eq!(slot_for(&last, 10, |xid| xid == 300), Some(2));
    }

    #[test]
    fn xids_older_than_the_horizon_or_2_to_the_31_behind_are_finished() {
        let next = 10u64 << 32 | 5_000; // epoch 10, 32-bit id 5,000
        assert!(no_snapshot_sees_running(next - 100, next, 4_950));
        assert!(!no_snapshot_sees_running(next - 50, next, 4_950));
        assert!(!no_snapshot_sees_running(next - 10, next, 4_950));
        assert!(no_snapshot_sees_running(next - (1 << 31), next, 4_950));
        // Across the 32-bit wrap: 4,294,967,000 (epoch 9) precedes 100 (epoch 10).
        let next = 10u64 << 32 | 200;
        assert!(no_snapshot_sees_running(9u64 << 32 | 4_294_967_000, next, 100));
        assert!(!no_snapshot_sees_running(10u64 << 32 | 150, next, 100));
    }
}
