//! The end of a transaction: what the claim floors (src/floors.rs), waiting checkouts
//! (src/waits.rs), deferred wake-ups (src/wakes.rs), CREATE EXTENSION (src/bgworker.rs) and
//! the dashboard's counters (src/counters.rs) noted during it is published to
//! shared memory at COMMIT, once the transaction's rows are visible and before its client
//! learns of the commit, and forgotten at ABORT. One transaction callback, registered once per
//! backend, serves them all, and runs floors first, so that a worker woken by a deferred
//! wake-up never starts its checkout above the job that woke it. Waiting checkouts alone are
//! rung later in the commit, once its locks are released (a resource-release callback): a
//! checkout woken before could meet a lock the committer still holds (a rate limit change's
//! key lock, src/sql/rate_limits.sql), pass the job over and sleep again with nothing left to
//! wake it. The counters follow subtransactions too (a subtransaction callback): a count must
//! not survive the rollback of what it counted; and what the fair checkout's walks remember
//! (src/fairness.rs) is forgotten at any abort.
use crate::{bgworker, counters, fairness, floors, waits, wakes};
use pgrx::prelude::*;
use std::cell::{Cell, RefCell};

/// What one module noted during the current transaction.
pub struct Notes<T>(RefCell<Vec<T>>);

impl<T> Notes<T> {
    pub const fn new() -> Self {
        Notes(RefCell::new(Vec::new()))
    }

    /// Changes the notes, making sure they are published or forgotten at the end of the
    /// transaction.
    pub fn update(&self, f: impl FnOnce(&mut Vec<T>)) {
        watch();
        f(&mut self.0.borrow_mut());
    }

    /// Reads the notes without publishing or forgetting them.
    pub fn read<R>(&self, f: impl FnOnce(&[T]) -> R) -> R {
        f(&self.0.borrow())
    }

    fn any(&self) -> bool {
        !self.0.borrow().is_empty()
    }

    fn take(&self) -> Vec<T> {
        std::mem::take(&mut *self.0.borrow_mut())
    }
}

thread_local! {
    static WATCHING: Cell<bool> = const { Cell::new(false) };
}

pub(crate) fn watch() {
    if !WATCHING.replace(true) {
        unsafe {
            pg_sys::RegisterXactCallback(Some(at_end_of_transaction), std::ptr::null_mut());
            pg_sys::RegisterSubXactCallback(Some(at_end_of_subtransaction), std::ptr::null_mut());
            pg_sys::RegisterResourceReleaseCallback(Some(after_locks), std::ptr::null_mut());
        }
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn at_end_of_subtransaction(
    event: pg_sys::SubXactEvent::Type,
    sub: pg_sys::SubTransactionId,
    parent: pg_sys::SubTransactionId,
    _arg: *mut std::ffi::c_void,
) {
    let committed = match event {
        pg_sys::SubXactEvent::SUBXACT_EVENT_COMMIT_SUB => true,
        pg_sys::SubXactEvent::SUBXACT_EVENT_ABORT_SUB => false,
        _ => return,
    };
    if counters::PENDING.with(Notes::any) {
        counters::at_subxact_end(committed, sub, parent);
    }
    if !committed {
        fairness::forget();
    }
}

/// The last phase of a top-level commit's resource release, its locks released: the waiting
/// checkouts its jobs, freed slots and changes concern are rung. (Called once per resource
/// owner of the transaction; the first call takes the notes. An abort forgets them in
/// at_end_of_transaction.) Nothing here may fail: the transaction has committed.
#[pg_guard]
unsafe extern "C-unwind" fn after_locks(
    phase: pg_sys::ResourceReleasePhase::Type,
    is_commit: bool,
    is_top_level: bool,
    _arg: *mut std::ffi::c_void,
) {
    if phase == pg_sys::ResourceReleasePhase::RESOURCE_RELEASE_AFTER_LOCKS && is_commit && is_top_level && waits::PENDING.with(Notes::any) {
        waits::ring(&waits::PENDING.with(Notes::take));
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn at_end_of_transaction(event: pg_sys::XactEvent::Type, _arg: *mut std::ffi::c_void) {
    match event {
        pg_sys::XactEvent::XACT_EVENT_PRE_PREPARE => {
            // Their rows become visible at COMMIT PREPARED, in another session: too late here.
            if floors::PENDING.with(Notes::any) || waits::PENDING.with(Notes::any) {
                error!("jobq: PREPARE TRANSACTION is not supported for a transaction that makes jobs ready");
            }
            if fairness::ADDED.with(Notes::any) {
                error!("jobq: PREPARE TRANSACTION is not supported for a transaction that adds fairness keys");
            }
            if wakes::PENDING.with(Notes::any) {
                error!("jobq: PREPARE TRANSACTION is not supported for a transaction that notifies (jobq.notify = deferred)");
            }
            if bgworker::PENDING.with(Notes::any) {
                error!("jobq: PREPARE TRANSACTION is not supported for a transaction that creates the extension");
            }
        }
        pg_sys::XactEvent::XACT_EVENT_PREPARE => {
            fairness::forget(); // its claims may yet be rolled back, in another session
            waits::leave();
            counters::at_commit(counters::PENDING.with(Notes::take));
        }
        pg_sys::XactEvent::XACT_EVENT_COMMIT => {
            // Nothing here may fail: the transaction has committed.
            let keys = floors::PENDING.with(Notes::take);
            if let Some(low) = keys.iter().map(|(_, k)| *k).min() {
                floors::apply_lowering(&keys);
                fairness::made_ready(low); // after the floors: the walks' memory of idle keys (src/fairness.rs)
            }
            // This transaction's own waiter slot goes first, so that it cannot take a ring
            // (the rings go out in after_locks, below, after the floors applied here: a
            // waiting checkout rung starts at or below its job).
            waits::leave();
            let queues = wakes::PENDING.with(Notes::take);
            if !queues.is_empty() {
                wakes::post(&queues);
            }
            if bgworker::PENDING.with(Notes::any) {
                bgworker::PENDING.with(Notes::take);
                bgworker::post_serve();
            }
            if counters::PENDING.with(Notes::any) {
                counters::at_commit(counters::PENDING.with(Notes::take));
            }
            if fairness::ADDED.with(Notes::any) {
                let low = fairness::ADDED.with(Notes::take).into_iter().min();
                fairness::added(low.unwrap_or(i64::MAX));
            }
        }
        pg_sys::XactEvent::XACT_EVENT_ABORT => {
            fairness::forget();
            fairness::ADDED.with(Notes::take);
            waits::PENDING.with(Notes::take);
            waits::leave();
            floors::PENDING.with(Notes::take);
            wakes::PENDING.with(Notes::take);
            bgworker::PENDING.with(Notes::take);
            if counters::PENDING.with(Notes::any) {
                counters::at_abort(counters::PENDING.with(Notes::take));
            }
        }
        _ => {}
    }
}
