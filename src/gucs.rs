//! The `jobq.*` settings. They are real GUCs with units, so `'200ms'`, `'2s'` and `'1d'`
//! all work and out-of-range values are refused by PostgreSQL itself.
use pgrx::guc::{GucContext, GucFlags, GucRegistry, GucSetting, PostgresGucEnum};
use std::ffi::CString;

/// Empty: every database where jobq is installed.
pub static DATABASE: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(None);
pub static MAX_DATABASES: GucSetting<i32> = GucSetting::<i32>::new(16);
pub static REAP_INTERVAL_MS: GucSetting<i32> = GucSetting::<i32>::new(1_000);
pub static HEARTBEAT_TIMEOUT_MS: GucSetting<i32> = GucSetting::<i32>::new(30_000);
/// Retention is in seconds: a day in milliseconds would still fit, a month would not.
pub static RETENTION_S: GucSetting<i32> = GucSetting::<i32>::new(86_400);
/// Dead row versions in the hot tables before the background worker compacts them (src/compact.rs).
pub static COMPACT_AFTER: GucSetting<i32> = GucSetting::<i32>::new(100_000);

/// Who sends the NOTIFY of an enqueue (src/wakes.rs).
#[derive(PostgresGucEnum, Clone, Copy, PartialEq, Debug)]
pub enum Notify {
    /// The enqueuing transaction, in its commit.
    #[name = c"immediate"]
    Immediate,
    /// The background worker, right after the enqueue commits (the default: notifying
    /// transactions commit one at a time, src/wakes.rs).
    #[name = c"deferred"]
    Deferred,
}
pub static NOTIFY: GucSetting<Notify> = GucSetting::<Notify>::new(Notify::Deferred);

/// Defines the settings. `jobq.database` only exists with `shared_preload_libraries = 'jobq'`:
/// it is read once at server start, and PostgreSQL refuses to define such a setting in a
/// backend that loads the library later (as every backend does without the preload).
pub fn define(preloading: bool) {
    if preloading {
        GucRegistry::define_string_guc(
            c"jobq.database",
            c"The one database the jobq background workers serve; empty: every database where jobq is installed.",
            c"Only read at server start.",
            &DATABASE,
            GucContext::Postmaster,
            GucFlags::default(),
        );
    }
    GucRegistry::define_int_guc(
        c"jobq.max_databases",
        c"Most databases the jobq background workers serve at once (one reaper each).",
        c"Each reaper is a background worker: max_worker_processes must leave room for them.",
        &MAX_DATABASES,
        0,
        1024,
        GucContext::Sighup,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"jobq.reap_interval",
        c"Time between two reap passes of the jobq background worker.",
        c"",
        &REAP_INTERVAL_MS,
        10,
        i32::MAX,
        GucContext::Sighup,
        GucFlags::UNIT_MS,
    );
    GucRegistry::define_int_guc(
        c"jobq.heartbeat_timeout",
        c"Heartbeat age after which a jobq worker is dead.",
        c"",
        &HEARTBEAT_TIMEOUT_MS,
        100,
        i32::MAX,
        GucContext::Suset,
        GucFlags::UNIT_MS,
    );
    GucRegistry::define_int_guc(
        c"jobq.retention",
        c"How long completed, dead and cancelled jobs are kept before the reaper deletes them.",
        c"",
        &RETENTION_S,
        0,
        i32::MAX,
        GucContext::Suset,
        GucFlags::UNIT_S,
    );
    GucRegistry::define_int_guc(
        c"jobq.compact_after",
        c"Dead row versions in jobq's hot tables (a transaction elsewhere holds the xmin horizon) before the background worker compacts them with TRUNCATE; 0: never.",
        c"A compaction locks jobq.ready, jobq.live_jobs and jobq.slots for as long as copying their live rows takes; a REPEATABLE READ transaction whose snapshot predates it gets 40001 from jobq's functions.",
        &COMPACT_AFTER,
        0,
        i32::MAX,
        GucContext::Sighup,
        GucFlags::default(),
    );
    GucRegistry::define_enum_guc(
        c"jobq.notify",
        c"Who sends the NOTIFY that wakes listening workers: the enqueuing transaction (immediate) or the background worker right after its commit (deferred).",
        c"deferred lets enqueues commit without waiting for each other; it falls back to immediate where no background worker serves the database.",
        &NOTIFY,
        GucContext::Userset,
        GucFlags::default(),
    );
}

/// SQL reads the settings through Rust functions rather than `current_setting()`: calling
/// them loads the library, so the GUCs are defined, with their units, even in a session of a
/// server without `shared_preload_libraries = 'jobq'`. (`jobq.heartbeat_timeout` is read by
/// `jobq.worker_alive()` in liveness.rs.)
#[pgrx::pg_schema]
pub mod jobq {
    use pgrx::prelude::*;

    #[pg_extern(stable, parallel_safe)]
    pub fn retention_ms() -> i64 {
        super::RETENTION_S.get() as i64 * 1000
    }

    /// `jobq.compact_after`: the dead row versions the hot tables may hold before the
    /// background worker compacts them (0: never; src/compact.rs).
    #[pg_extern(stable, parallel_safe)]
    pub fn compact_after() -> i64 {
        super::COMPACT_AFTER.get() as i64
    }
}
