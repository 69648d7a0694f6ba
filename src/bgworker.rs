//! The background worker: runs one reap pass every `jobq.reap_interval` in `jobq.database`.
//!
//! Each pass runs `jobq._reap_pass()` in its own short transaction. That SQL function catches
//! and logs any error of the pass itself, so a bad pass never kills the worker; if the worker
//! dies anyway, the postmaster restarts it after `RESTART_AFTER`.
use crate::gucs;
use pgrx::bgworkers::*;
use pgrx::prelude::*;
use std::time::Duration;

const RESTART_AFTER: Duration = Duration::from_secs(5);

pub fn register() {
    BackgroundWorkerBuilder::new("jobq reaper")
        .set_type("jobq reaper")
        .set_function("jobq_reaper_main")
        .set_library("jobq")
        .enable_spi_access()
        .set_restart_time(Some(RESTART_AFTER))
        .load();
}

#[pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn jobq_reaper_main(_arg: pg_sys::Datum) {
    BackgroundWorker::attach_signal_handlers(SignalWakeFlags::SIGHUP | SignalWakeFlags::SIGTERM);
    let database = gucs::DATABASE
        .get()
        .and_then(|c| c.into_string().ok())
        .unwrap_or_else(|| "postgres".to_string());
    BackgroundWorker::connect_worker_to_spi(Some(&database), None);
    log!("jobq reaper: serving database \"{database}\"");

    let mut said_missing = false;
    while BackgroundWorker::wait_latch(Some(interval())) {
        if BackgroundWorker::sighup_received() {
            unsafe { pg_sys::ProcessConfigFile(pg_sys::GucContext::PGC_SIGHUP) };
        }
        if unsafe { pg_sys::RecoveryInProgress() } {
            continue; // hot standby: nothing to reap until promoted
        }
        let installed = BackgroundWorker::transaction(|| {
            let installed = Spi::get_one::<bool>(
                "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_extension WHERE extname = 'jobq')",
            )
            .ok()
            .flatten()
            .unwrap_or(false);
            if installed {
                Spi::run("SELECT jobq._reap_pass()").ok();
            }
            installed
        });
        if !installed && !said_missing {
            log!("jobq reaper: extension jobq is not installed in \"{database}\" yet; waiting");
        }
        said_missing = !installed;
    }
    // Exit non-zero so a pg_terminate_backend() does not unregister the worker for good.
    unsafe { pg_sys::proc_exit(1) };
}

fn interval() -> Duration {
    Duration::from_millis(gucs::REAP_INTERVAL_MS.get().max(10) as u64)
}
