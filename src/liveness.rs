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

fn session_exists(pid: i32, started: Option<pg_sys::TimestampTz>) -> bool {
    unsafe {
        // The backend status array as of this transaction (what pg_stat_activity shows).
        let n = pg_sys::pgstat_fetch_stat_numbackends();
        for i in 1..=n {
            let entry = pg_sys::pgstat_fetch_stat_local_beentry(i);
            if entry.is_null() {
                continue;
            }
            let status = &(*entry).backendStatus;
            if status.st_procpid == pid {
                return started.is_none_or(|s| s == status.st_proc_start_timestamp);
            }
        }
    }
    false
}

#[pg_schema]
pub mod jobq {
    use pgrx::prelude::*;

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
