//! The background workers (only with `shared_preload_libraries = 'jobq'`):
//!
//! - **jobq launcher** (static, restarted by the postmaster 5 s after a crash): connects to
//!   no database, waits until `jobq.database` exists and allows connections (logging each
//!   reason once, not crash-looping), then starts the reaper as a dynamic worker and starts
//!   it again whenever it stops. A reaper that stops soon after its start, or that cannot be
//!   started (`max_worker_processes` reached), is started again after a backoff of 1 s,
//!   2 s, 4 s … up to a minute, with one log line per attempt.
//! - **jobq reaper** (dynamic, connected to `jobq.database`): every `jobq.reap_interval` runs
//!   one reap pass, `jobq._reap_pass()`, in its own short transaction, shows it in
//!   `pg_stat_activity` (`jobq reap pass`, active or idle) and reports its table statistics
//!   after it (so autovacuum sees the rows it deleted). That SQL function catches and logs the
//!   errors of a pass, so a bad pass never stops the next one. If the extension is not
//!   created in the database yet, it says so once and waits. Every 200 ms it raises the
//!   claim floors of its database (`src/floors.rs`) and checks whether someone waits to lock
//!   its database exclusively (`DROP DATABASE`, `ALTER DATABASE … RENAME`), and then leaves,
//!   as autovacuum does, so that such a command is never blocked by it. Woken through its
//!   latch by the commits of enqueues with `jobq.notify = deferred`, it sends their NOTIFYs
//!   (`src/wakes.rs`).
//!
//! Both re-read the configuration on SIGHUP, exit promptly on SIGTERM (with code 1, so a
//! `pg_terminate_backend()` does not unregister them for good), start only once the server
//! is out of recovery (a hot standby runs neither until it is promoted) and check
//! `RecoveryInProgress()` on every tick anyway.
use crate::{floors, gucs, wakes};
use pgrx::bgworkers::*;
use pgrx::prelude::*;
use pgrx::PgMemoryContexts;
use std::time::{Duration, Instant};

const RESTART_AFTER: Duration = Duration::from_secs(5);
/// How often the launcher looks at the database and at its reaper.
const LAUNCHER_TICK: Duration = Duration::from_millis(500);
/// A reaper that ran this long before it stopped was not crash-looping: no backoff.
const STABLE: Duration = Duration::from_secs(60);
/// How often the reaper raises the claim floors (src/floors.rs): a checkout walks the dead
/// entries of at most this long's claims.
const FLOOR_TICK: Duration = Duration::from_millis(200);

/// Exponential backoff for (re)starting the reaper: 1 s, 2 s, 4 s … 60 s.
#[derive(Default)]
struct Backoff {
    failures: u32,
    until: Option<Instant>,
}

impl Backoff {
    fn waiting(&self) -> bool {
        self.until.is_some_and(|t| Instant::now() < t)
    }
    /// Records a failure; returns the delay before the next attempt.
    fn failed(&mut self) -> Duration {
        let delay = Duration::from_secs(1 << self.failures.min(6)).min(Duration::from_secs(60));
        self.failures += 1;
        self.until = Some(Instant::now() + delay);
        delay
    }
    fn reset(&mut self) {
        *self = Backoff::default();
    }
}

pub fn register() {
    BackgroundWorkerBuilder::new("jobq launcher")
        .set_type("jobq launcher")
        .set_function("jobq_launcher_main")
        .set_library("jobq")
        .enable_spi_access() // also: start only after recovery finished
        .set_restart_time(Some(RESTART_AFTER))
        .load();
}

fn database_name() -> String {
    gucs::DATABASE.get().and_then(|c| c.into_string().ok()).unwrap_or_else(|| "postgres".into())
}

fn reload_config_on_sighup() {
    if BackgroundWorker::sighup_received() {
        unsafe { pg_sys::ProcessConfigFile(pg_sys::GucContext::PGC_SIGHUP) };
    }
}

fn start_reaper(db_oid: pg_sys::Oid) -> Option<DynamicBackgroundWorker> {
    let builder = BackgroundWorkerBuilder::new("jobq reaper")
        .set_type("jobq reaper")
        .set_function("jobq_reaper_main")
        .set_library("jobq")
        .enable_spi_access()
        .set_argument(Some(pg_sys::Datum::from(u32::from(db_oid))))
        .set_notify_pid(unsafe { pg_sys::MyProcPid });
    // The handle must outlive every transaction: allocate it in TopMemoryContext.
    let started = unsafe { PgMemoryContexts::TopMemoryContext.switch_to(|_| builder.load_dynamic()) };
    started.ok()
}

/// The oid of database `name` and whether it allows connections, by a plain heap scan of
/// pg_database (as the autovacuum launcher does): a worker connected to no database cannot
/// use the catalog indexes.
fn find_database(name: &str) -> Option<(pg_sys::Oid, bool)> {
    unsafe {
        let rel = pg_sys::table_open(pg_sys::DatabaseRelationId, pg_sys::AccessShareLock as _);
        let scan = pg_sys::table_beginscan_catalog(rel, 0, std::ptr::null_mut());
        let mut found = None;
        loop {
            let tuple = pg_sys::heap_getnext(scan, pg_sys::ScanDirection::ForwardScanDirection);
            if tuple.is_null() {
                break;
            }
            let db = &*pg_sys::heap_tuple_get_struct::<pg_sys::FormData_pg_database>(tuple);
            if std::ffi::CStr::from_ptr(db.datname.data.as_ptr()).to_bytes() == name.as_bytes() {
                found = Some((db.oid, db.datallowconn));
                break;
            }
        }
        pg_sys::table_endscan(scan);
        pg_sys::table_close(rel, pg_sys::AccessShareLock as _);
        found
    }
}

#[pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn jobq_launcher_main(_arg: pg_sys::Datum) {
    BackgroundWorker::attach_signal_handlers(SignalWakeFlags::SIGHUP | SignalWakeFlags::SIGTERM);
    BackgroundWorker::connect_worker_to_spi(None, None); // shared catalogs only
    let database = database_name();
    let mut reaper: Option<(DynamicBackgroundWorker, Instant)> = None;
    let mut backoff = Backoff::default();
    // Why the launcher is waiting, logged once per reason until it changes.
    let mut said: Option<&str> = None;
    let say_once = |reason: &'static str, said: &mut Option<&str>| {
        if *said != Some(reason) {
            log!("jobq launcher: database \"{database}\" (jobq.database) {reason}; waiting");
            *said = Some(reason);
        }
    };

    while BackgroundWorker::wait_latch(Some(LAUNCHER_TICK)) {
        reload_config_on_sighup();
        if unsafe { pg_sys::RecoveryInProgress() } {
            continue;
        }
        if let Some((handle, started)) = &reaper {
            match handle.pid() {
                Ok(_) | Err(BackgroundWorkerStatus::NotYetStarted) => {
                    if started.elapsed() >= STABLE {
                        backoff.reset();
                    }
                    continue;
                }
                Err(_) if started.elapsed() >= STABLE => {
                    backoff.reset();
                    log!("jobq launcher: the reaper stopped; starting it again");
                }
                Err(_) => {
                    let delay = backoff.failed();
                    log!(
                        "jobq launcher: the reaper stopped {:.1} s after its start ({} time(s) in a row); starting it again in {} s",
                        started.elapsed().as_secs_f64(),
                        backoff.failures,
                        delay.as_secs()
                    );
                }
            }
            reaper = None;
        }
        if backoff.waiting() {
            continue;
        }
        match BackgroundWorker::transaction(|| find_database(&database)) {
            None => say_once("does not exist yet", &mut said),
            Some((_, false)) => say_once("does not allow connections", &mut said),
            Some((oid, true)) => {
                said = None;
                match start_reaper(oid) {
                    Some(handle) => reaper = Some((handle, Instant::now())),
                    None => {
                        let delay = backoff.failed();
                        warning!(
                            "jobq launcher: could not start the reaper (max_worker_processes reached?); trying again in {} s",
                            delay.as_secs()
                        );
                    }
                }
            }
        }
    }
    if let Some((handle, _)) = reaper {
        handle.terminate();
    }
    unsafe { pg_sys::proc_exit(1) };
}

/// True when another session holds, or waits for, a lock on this database that a new
/// connection would wait for: `DROP DATABASE` (and `ALTER DATABASE … RENAME` or `SET
/// TABLESPACE`), which then waits for the sessions connected to it to leave.
fn database_wanted_exclusively() -> bool {
    unsafe {
        let mut tag: pg_sys::LOCKTAG = std::mem::zeroed();
        tag.locktag_field1 = pg_sys::InvalidOid.into(); // a shared object
        tag.locktag_field2 = pg_sys::DatabaseRelationId.into();
        tag.locktag_field3 = pg_sys::MyDatabaseId.into();
        tag.locktag_type = pg_sys::LockTagType::LOCKTAG_OBJECT as u8;
        tag.locktag_lockmethodid = pg_sys::DEFAULT_LOCKMETHOD as u8;
        let mode = pg_sys::RowExclusiveLock as pg_sys::LOCKMODE;
        if pg_sys::LockAcquire(&tag, mode, false, true) == pg_sys::LockAcquireResult::LOCKACQUIRE_NOT_AVAIL {
            return true;
        }
        pg_sys::LockRelease(&tag, mode, false);
        false
    }
}

#[pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn jobq_reaper_main(arg: pg_sys::Datum) {
    BackgroundWorker::attach_signal_handlers(SignalWakeFlags::SIGHUP | SignalWakeFlags::SIGTERM);
    let db_oid = pg_sys::Oid::from(arg.value() as u32);
    BackgroundWorker::connect_worker_to_spi_by_oid(Some(db_oid), None);
    let database = database_name();
    // Deferred wake-ups (src/wakes.rs): an enqueue's commit sets this worker's latch; the first
    // send also notifies every queue with a due job (what was noted before it started).
    let serving = wakes::serve();
    log!("jobq reaper: serving database \"{database}\" every {:?}", interval());

    let mut said_missing = false;
    let mut current = interval();
    let mut last_pass: Option<Instant> = None;
    let mut sweep = true;
    let tick = || interval().min(FLOOR_TICK);
    let mut last_tick = Instant::now().checked_sub(FLOOR_TICK).unwrap_or_else(Instant::now);
    // Rounded up to whole milliseconds, the unit of WaitLatch: rounded down, the last
    // fraction of a tick would spin.
    let until_tick = |last: Instant| Duration::from_millis(tick().saturating_sub(last.elapsed()).as_micros().div_ceil(1000) as u64);
    while BackgroundWorker::wait_latch(Some(until_tick(last_tick))) {
        reload_config_on_sighup();
        if interval() != current {
            current = interval();
            log!("jobq reaper: reap interval is now {} ms", current.as_millis());
        }
        if unsafe { pg_sys::RecoveryInProgress() } {
            continue;
        }
        if serving {
            wakes::send(std::mem::take(&mut sweep));
        }
        // Wake-ups set the latch often; the rest runs on its ticks.
        if last_tick.elapsed() < tick() {
            continue;
        }
        last_tick = Instant::now();
        if BackgroundWorker::transaction(database_wanted_exclusively) {
            log!("jobq reaper: leaving database \"{database}\": another session waits to drop or alter it");
            unsafe { pg_sys::proc_exit(0) };
        }
        floors::raise();
        if last_pass.is_some_and(|t| t.elapsed() < current) {
            continue;
        }
        last_pass = Some(Instant::now());
        unsafe { pg_sys::pgstat_report_activity(pg_sys::BackendState::STATE_RUNNING, c"jobq reap pass".as_ptr()) };
        let installed = BackgroundWorker::transaction(|| {
            let installed = Spi::get_one::<bool>(
                "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_extension WHERE extname = 'jobq')",
            )
            .ok()
            .flatten()
            .unwrap_or(false);
            if installed {
                // Errors of the pass are caught and logged inside _reap_pass.
                Spi::run("SELECT jobq._reap_pass()").ok();
            }
            installed
        });
        unsafe {
            pg_sys::pgstat_report_activity(pg_sys::BackendState::STATE_IDLE, c"jobq reap pass".as_ptr());
            // As a backend does between transactions: the rows the pass changed reach the
            // statistics autovacuum reads (at most once a second; PostgreSQL batches them).
            pg_sys::pgstat_report_stat(false);
        }
        if !installed && !said_missing {
            log!("jobq reaper: extension jobq is not created in \"{database}\" yet; waiting for it");
        }
        said_missing = !installed;
    }
    unsafe { pg_sys::proc_exit(1) };
}

fn interval() -> Duration {
    Duration::from_millis(gucs::REAP_INTERVAL_MS.get().max(10) as u64)
}
