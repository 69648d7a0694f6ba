//! The liveness rule, compiled once: every SQL function that judges a worker calls
//! `jobq.worker_alive(heartbeat_at, backend_pid, backend_start)`.
//!
//! A worker is alive while its heartbeat is younger than `jobq.heartbeat_timeout` (judged
//! against the clock at the call, not the transaction start) and, when it was registered
//! with `bind_to_session`, while that very session exists: same pid *and* same backend start
//! time, so a recycled pid does not keep a dead worker alive.
//!
//! This is Rust rather than SQL because it sits on the hot path (every checkout, heartbeat
//! and lock call): a SQL helper with a pinned search_path is re-planned on every call.
use pgrx::prelude::*;

/// Whether the session `pid` started at `started` still exists, judged on the live process
/// table, not on the backend-status snapshot PostgreSQL caches for the rest of a transaction
/// (with that snapshot, a session that started after the transaction first looked would be
/// dead to it, and one that ended would still be alive).
fn session_exists(pid: i32, started: Option<pg_sys::TimestampTz>) -> bool {
    // The process table (ProcArray) is read live: no such pid, no session.
    if unsafe { pg_sys::BackendPidGetProc(pid) }.is_null() {
        return false;
    }
    let Some(started) = started else { return true };
    // The pid lives; is it the same session, not a later one that reuses the pid? Only the
    // backend status knows start times. Its cached snapshot is right when it shows this pid
    // with this start time (a pid is not reused while its session lives); otherwise the
    // snapshot may predate the session, so it is read anew, once.
    if start_in_snapshot(pid) == Some(started) {
        return true;
    }
    unsafe { pg_sys::pgstat_clear_backend_activity_snapshot() };
    start_in_snapshot(pid) == Some(started)
}

/// The start time of session `pid` in this backend's snapshot of the backend status array.
fn start_in_snapshot(pid: i32) -> Option<pg_sys::TimestampTz> {
    unsafe {
        let n = pg_sys::pgstat_fetch_stat_numbackends();
        for i in 1..=n {
            #[cfg(feature = "pg15")]
            let entry = pg_sys::pgstat_fetch_stat_local_beentry(i);
            // Renamed in PostgreSQL 16; the same 1-based index into the same snapshot.
            #[cfg(not(feature = "pg15"))]
            let entry = pg_sys::pgstat_get_local_beentry_by_index(i);
            if entry.is_null() {
                continue;
            }
            let status = &(*entry).backendStatus;
            if status.st_procpid == pid {
                return Some(status.st_proc_start_timestamp);
            }
        }
    }
    None
}

/// The worker test checkout and completion share: `worker`'s row of `workers` (jobq.workers),
/// read by primary key in `snapshot` (src/rows.rs); true when it exists, is alive and not
/// stopping (asked only with `alive`, by checkout: a completion is fenced by its job row, not
/// by liveness, and a stopping worker still completes its jobs) and the caller may act for it.
/// None when jobq.workers lacks a column it reads (but `stopping_at`, which a database of an
/// earlier version lacks).
pub(crate) unsafe fn usable(workers: pg_sys::Relation, worker: pg_sys::Datum, snapshot: pg_sys::Snapshot, alive: bool) -> Option<bool> {
    let desc = (*workers).rd_att;
    let col = |name| crate::rows::column(desc, name).map(|i| (i + 1) as i32);
    let Some(t) = crate::rows::fetch(workers, col("id")? as i16, pg_sys::F_UUID_EQ, worker, snapshot) else {
        return Some(false);
    };
    let get = |attno: i32| crate::rows::attr(t, desc, attno);
    if alive {
        let ts = |d: Option<pg_sys::Datum>| d.and_then(|d| TimestampWithTimeZone::try_from(d.value() as i64).ok());
        let (hb, pid, start) = (col("heartbeat_at")?, col("backend_pid")?, col("backend_start")?);
        if !jobq::worker_alive(ts(get(hb)), get(pid).map(|d| d.value() as i32), ts(get(start))) {
            return Some(false);
        }
        // Stopping (jobq_stop_checkouts): no checkout claims for it; the SQL says so. (A
        // database not yet updated to a version with the column has no stopping worker.)
        if col("stopping_at").is_some_and(|c| get(c).is_some()) {
            return Some(false);
        }
    }
    let owner = get(col("owner")?).map_or(pg_sys::InvalidOid, |d| pg_sys::Oid::from(d.value() as u32));
    Some(crate::privileges::jobq::may_act_for(owner))
}

#[pg_schema]
pub mod jobq {
    use pgrx::prelude::*;

    /// True when `worker` is registered, alive, not stopping and the caller may act for it:
    /// checkout's test,
    /// one lookup by primary key instead of a part of its claim statement (docs/internals.md, "CPU per job: what each step saved").
    #[pg_extern(volatile, parallel_unsafe, name = "_usable_worker")]
    pub fn usable_worker(worker: pgrx::Uuid) -> bool {
        let key = worker.into_datum().unwrap();
        unsafe {
            let nsp = crate::relids::schema(true);
            let relid = crate::relids::relation(nsp, c"workers");
            if relid == pg_sys::InvalidOid {
                return false;
            }
            let rel = pg_sys::table_open(relid, pg_sys::AccessShareLock as i32);
            let usable = super::usable(rel, key, pg_sys::GetActiveSnapshot(), true);
            pg_sys::table_close(rel, pg_sys::NoLock as i32);
            usable.unwrap_or(false)
        }
    }

    #[pg_extern(volatile, parallel_safe)]
    pub fn worker_alive(
        heartbeat_at: Option<TimestampWithTimeZone>,
        backend_pid: Option<i32>,
        backend_start: Option<TimestampWithTimeZone>,
    ) -> bool {
        let Some(heartbeat_at) = heartbeat_at else { return false };
        let now = unsafe { pg_sys::GetCurrentTimestamp() };
        let timeout_us = crate::gucs::HEARTBEAT_TIMEOUT_MS.get() as i64 * 1000;
        if heartbeat_at.into_inner() <= now - timeout_us {
            return false;
        }
        match backend_pid {
            None => true,
            Some(pid) => super::session_exists(pid, backend_start.map(|s| s.into_inner())),
        }
    }
}
