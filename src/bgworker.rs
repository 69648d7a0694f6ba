//! The background workers (only with `shared_preload_libraries = 'jobq'`):
//!
//! - **jobq launcher** (static, restarted by the postmaster 5 s after a crash): connects to
//!   no database, waits until `jobq.database` exists (logging that once, not crash-looping),
//!   then starts the reaper as a dynamic worker and restarts it whenever it stops.
//! - **jobq reaper** (dynamic, connected to `jobq.database`): every `jobq.reap_interval` runs
//!   one reap pass, `jobq._reap_pass()`, in its own short transaction. That SQL function
//!   catches and logs the errors of a pass, so a bad pass never stops the next one. If the
//!   extension is not created in the database yet, it says so once and waits.
//!
//! Both re-read the configuration on SIGHUP, exit promptly on SIGTERM (with code 1, so a
//! `pg_terminate_backend()` does not unregister them for good), start only once the server
//! is out of recovery (a hot standby runs neither until it is promoted) and check
//! `RecoveryInProgress()` on every tick anyway.
use crate::gucs;
use pgrx::bgworkers::*;
use pgrx::prelude::*;
use pgrx::PgMemoryContexts;
use std::time::Duration;

const RESTART_AFTER: Duration = Duration::from_secs(5);
/// How often the launcher looks at the database and at its reaper.
const LAUNCHER_TICK: Duration = Duration::from_millis(500);

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
    match started {
        Ok(handle) => Some(handle),
        Err(_) => {
            warning!("jobq launcher: could not start the reaper (max_worker_processes reached?); will retry");
            None
        }
    }
}

/// The oid of database `name`, by a plain heap scan of pg_database (as the autovacuum
/// launcher does): a worker connected to no database cannot use the catalog indexes.
fn find_database(name: &str) -> Option<pg_sys::Oid> {
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
                found = Some(db.oid);
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
    let mut reaper: Option<DynamicBackgroundWorker> = None;
    let mut said_missing = false;

    while BackgroundWorker::wait_latch(Some(LAUNCHER_TICK)) {
        reload_config_on_sighup();
        if unsafe { pg_sys::RecoveryInProgress() } {
            continue;
        }
        if let Some(handle) = &reaper {
            match handle.pid() {
                Ok(_) | Err(BackgroundWorkerStatus::NotYetStarted) => continue,
                Err(_) => {
                    log!("jobq launcher: the reaper stopped; starting it again");
                    reaper = None;
                }
            }
        }
        let Some(oid) = BackgroundWorker::transaction(|| find_database(&database)) else {
            if !said_missing {
                log!("jobq launcher: database \"{database}\" (jobq.database) does not exist yet; waiting for it");
                said_missing = true;
            }
            continue;
        };
        said_missing = false;
        reaper = start_reaper(oid);
    }
    if let Some(handle) = reaper {
        handle.terminate();
    }
    unsafe { pg_sys::proc_exit(1) };
}

#[pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn jobq_reaper_main(arg: pg_sys::Datum) {
    BackgroundWorker::attach_signal_handlers(SignalWakeFlags::SIGHUP | SignalWakeFlags::SIGTERM);
    let db_oid = pg_sys::Oid::from(arg.value() as u32);
    BackgroundWorker::connect_worker_to_spi_by_oid(Some(db_oid), None);
    let database = database_name();
    log!("jobq reaper: serving database \"{database}\" every {:?}", interval());

    let mut said_missing = false;
    let mut current = interval();
    while BackgroundWorker::wait_latch(Some(current)) {
        reload_config_on_sighup();
        if interval() != current {
            current = interval();
            log!("jobq reaper: reap interval is now {} ms", current.as_millis());
        }
        if unsafe { pg_sys::RecoveryInProgress() } {
            continue;
        }
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
