//! Wake-ups: the `NOTIFY jobq, '<queue>'` that tells listening workers a queue has a due job.
//!
//! Every function that makes a job due now calls `jobq._notify(queue)`. With
//! `jobq.notify = immediate` that is `pg_notify('jobq', queue)` in the caller's transaction.
//! The price: PostgreSQL serialises the commits of notifying transactions on one cluster-wide
//! lock held across their commit record's flush, so notifying enqueues commit one at a time
//! (measured in bench/compare.sh, workload b: the baseline's single-job enqueue at 16 clients
//! does 22,368/s, 4,048/s with a NOTIFY).
//!
//! So with `jobq.notify = deferred` (the default) the enqueuer only notes the queue; at COMMIT, once its jobs are visible, the note goes into shared memory and the
//! background worker serving the database is woken through its latch; it sends one NOTIFY per
//! queue noted since its last look, in one short transaction of its own. Listeners get the
//! same channel and payload, after the jobs are visible, a few milliseconds later (measured:
//! bench/compare.sh workload e, row jobq_dn), and enqueues no longer queue behind each other's
//! commits. Never lost:
//! - where nothing would send it (no preload, no background worker serving this database when
//!   the call runs, a queue name over 63 bytes), the caller's transaction notifies at once,
//!   as with `immediate`;
//! - a note the background worker could not take (it stopped in between, or more distinct
//!   queues were noted at once than the table holds) is covered by a sweep: a background
//!   worker that starts, or finds the table overflowed, notifies every queue with a due job.
//!
//! A transaction that rolls back notes nothing; PREPARE TRANSACTION of one that noted a queue
//! is refused, as PostgreSQL refuses it for a transaction that ran NOTIFY.
//!
//! The background worker is woken the same way by a checkout that asks it to prune the turns of
//! fair queues at once ([`ask_prune`], src/fairness.rs says when).
use crate::{gucs, my_db};
use pgrx::bgworkers::BackgroundWorker;
use pgrx::prelude::*;
use pgrx::{pg_shmem_init, PGRXSharedMemory, PgLwLock};
use crate::xact::Notes;
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Databases served at once (one background worker each).
const SERVERS: usize = 64;
/// Queues noted and not yet sent, over all databases.
const NOTED: usize = 256;
const NAME_MAX: usize = 63;

#[derive(Copy, Clone)]
struct Server {
    db: u32, // 0: free
    pid: i32,
    latch: usize,    // the background worker's latch (in shared memory, valid in every process)
    overflow: bool,  // a note found no room: sweep every queue with a due job
    prune: bool,     // a checkout asked for the turns to be pruned now (ask_prune)
}

#[derive(Copy, Clone)]
struct Noted {
    db: u32, // 0: free
    len: u8,
    name: [u8; NAME_MAX],
}

#[derive(Copy, Clone)]
struct Wakes {
    servers: [Server; SERVERS],
    noted: [Noted; NOTED],
}
unsafe impl PGRXSharedMemory for Wakes {}

static WAKES: PgLwLock<Wakes> = unsafe { PgLwLock::new(c"jobq_wakes") };
static ENABLED: AtomicBool = AtomicBool::new(false);

/// Called from _PG_init while preloading.
pub fn init() {
    const FREE_SERVER: Server = Server { db: 0, pid: 0, latch: 0, overflow: false, prune: false };
    const FREE_NOTE: Noted = Noted { db: 0, len: 0, name: [0; NAME_MAX] };
    pg_shmem_init!(WAKES = Wakes { servers: [FREE_SERVER; SERVERS], noted: [FREE_NOTE; NOTED] });
    ENABLED.store(true, Ordering::Relaxed);
}

thread_local! {
    /// Queues this transaction noted, sent to shared memory at commit (src/xact.rs).
    pub(crate) static PENDING: Notes<String> = const { Notes::new() };
}

/// Wakes the listeners of `queue`: now, in this transaction, or through the background worker
/// after this transaction commits (module comment).
pub fn notify(queue: &str) {
    let deferred = ENABLED.load(Ordering::Relaxed)
        && gucs::NOTIFY.get() == gucs::Notify::Deferred
        && queue.len() <= NAME_MAX
        && served();
    if !deferred {
        unsafe {
            pgrx::direct_function_call::<()>(
                |f| pg_sys::pg_notify(f),
                &["jobq".into_datum(), queue.into_datum()],
            );
        }
        return;
    }
    PENDING.with(|p| {
        p.update(|p| {
            if !p.iter().any(|q| q == queue) {
                p.push(queue.to_owned());
            }
        })
    });
}

/// Whether a background worker serves this database now.
fn served() -> bool {
    let db = my_db();
    WAKES.share().servers.iter().any(|s| s.db == db)
}

/// At commit: notes the queues not noted yet and wakes the background worker. Nothing here
/// may fail (the transaction has committed).
pub(crate) fn post(queues: &[String]) {
    let db = my_db();
    let latch = {
        let mut w = WAKES.exclusive();
        let mut news = false;
        for q in queues {
            let is = |n: &Noted| n.db == db && &n.name[..n.len as usize] == q.as_bytes();
            if w.noted.iter().any(is) {
                continue; // not sent yet: the background worker is awake already
            }
            news = true;
            match w.noted.iter_mut().find(|n| n.db == 0) {
                Some(n) => {
                    *n = Noted { db, len: q.len() as u8, name: [0; NAME_MAX] };
                    n.name[..q.len()].copy_from_slice(q.as_bytes());
                }
                None => {
                    if let Some(s) = w.servers.iter_mut().find(|s| s.db == db) {
                        s.overflow = true;
                    } // no server: the next one to start sweeps
                }
            }
        }
        if !news {
            return;
        }
        w.servers.iter().find(|s| s.db == db).map(|s| s.latch)
    };
    if let Some(latch) = latch {
        unsafe { pg_sys::SetLatch(latch as *mut pg_sys::Latch) };
    }
}

/// The background worker of this database starts sending its wake-ups. Returns false when
/// every slot is taken (then enqueues here notify at once).
pub fn serve() -> bool {
    if !ENABLED.load(Ordering::Relaxed) {
        return false;
    }
    let db = my_db();
    let mut w = WAKES.exclusive();
    let Some(s) = w.servers.iter_mut().find(|s| s.db == db || s.db == 0) else { return false };
    // overflow: the sweep at the first send covers whatever was noted before.
    *s = Server { db, pid: unsafe { pg_sys::MyProcPid }, latch: unsafe { pg_sys::MyLatch } as usize, overflow: false, prune: false };
    unsafe { pg_sys::before_shmem_exit(Some(leave), pg_sys::Datum::from(0)) };
    true
}

/// The least time between two asks of one backend, and between two prunes a background worker
/// runs on asks ([`ask_prune`]).
pub const PRUNE_GAP: Duration = Duration::from_millis(100);

thread_local! {
    /// When this backend last asked for a prune.
    static LAST_ASK: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// A checkout's walk of the turns passed many keys that have no waiting job (src/fairness.rs):
/// asks the background worker of this database to prune the turns now (`jobq._prune_fairness`)
/// rather than at its next pass, and wakes it. At most once per [`PRUNE_GAP`] per backend;
/// nothing where no background worker serves this database.
pub(crate) fn ask_prune() {
    if !ENABLED.load(Ordering::Relaxed) || LAST_ASK.get().is_some_and(|t| t.elapsed() < PRUNE_GAP) {
        return;
    }
    LAST_ASK.set(Some(Instant::now()));
    let db = my_db();
    let latch = {
        let mut w = WAKES.exclusive();
        let Some(s) = w.servers.iter_mut().find(|s| s.db == db) else { return };
        if std::mem::replace(&mut s.prune, true) {
            return; // asked already: the background worker is awake
        }
        s.latch
    };
    unsafe { pg_sys::SetLatch(latch as *mut pg_sys::Latch) };
}

/// The background worker of this database takes the ask for a prune, if there is one.
pub fn prune_asked() -> bool {
    let db = my_db();
    let mut w = WAKES.exclusive();
    w.servers.iter_mut().find(|s| s.db == db).is_some_and(|s| std::mem::take(&mut s.prune))
}

#[pg_guard]
unsafe extern "C-unwind" fn leave(_code: i32, _arg: pg_sys::Datum) {
    let pid = unsafe { pg_sys::MyProcPid };
    let mut w = WAKES.exclusive();
    if let Some(s) = w.servers.iter_mut().find(|s| s.pid == pid && s.db != 0) {
        s.db = 0;
        s.pid = 0;
    }
}

/// The longest a sweep waits for the previous one: many distinct queues noted at once
/// overflow the table on every commit, and a sweep reads the whole waiting set.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

thread_local! {
    /// When this background worker last swept.
    static LAST_SWEEP: Cell<Option<Instant>> = const { Cell::new(None) };
    /// Whether its last send was skipped (logged once until one goes through).
    static SKIPPING: Cell<bool> = const { Cell::new(false) };
}

/// The background worker's send: one NOTIFY per queue noted for its database since the last
/// send, in one transaction; with `sweep` (its first send) or after an overflow (at most once
/// per SWEEP_EVERY), one for every queue with a due job. It never raises: with PostgreSQL's
/// notification queue over half full (a listener that stopped reading) it sends nothing and
/// sweeps later instead, so the background worker's other duties never stop for it.
pub fn send(sweep: bool) {
    let db = my_db();
    let may_sweep = sweep || LAST_SWEEP.get().is_none_or(|t| t.elapsed() >= SWEEP_EVERY);
    let (queues, overflow) = {
        let mut w = WAKES.exclusive();
        let mut queues = Vec::new();
        for n in w.noted.iter_mut().filter(|n| n.db == db) {
            queues.push(String::from_utf8_lossy(&n.name[..n.len as usize]).into_owned());
            n.db = 0;
        }
        // An overflow not swept now stays flagged for a later send.
        let overflow = may_sweep
            && w.servers.iter_mut().find(|s| s.db == db).is_some_and(|s| std::mem::take(&mut s.overflow));
        (queues, overflow)
    };
    if queues.is_empty() && !overflow && !sweep {
        return;
    }
    let sent = BackgroundWorker::transaction(|| {
        if Spi::get_one::<bool>("SELECT pg_catalog.pg_notification_queue_usage() < 0.5").ok().flatten() != Some(true) {
            return false;
        }
        // A sweep reads the waiting set whole (DISTINCT over every waiting job): only at start,
        // after an overflow, after a skipped send, and only once the extension exists here.
        let sweep = (sweep || overflow) && crate::bgworker::hold_extension();
        let sql = if sweep {
            "SELECT pg_catalog.pg_notify('jobq', n.q)
               FROM (SELECT unnest($1::text[])
                     UNION
                     SELECT r.queue FROM jobq.ready r WHERE r.run_at <= clock_timestamp()) AS n(q)"
        } else {
            "SELECT pg_catalog.pg_notify('jobq', n.q) FROM unnest($1::text[]) AS n(q)"
        };
        Spi::run_with_args(sql, &[queues.into()]).is_ok()
    });
    if sweep || overflow {
        LAST_SWEEP.set(Some(Instant::now()));
    }
    if !sent {
        // Sweep when it can send again (flagged as an overflow); say so once.
        if let Some(s) = WAKES.exclusive().servers.iter_mut().find(|s| s.db == db) {
            s.overflow = true;
        }
        if !SKIPPING.replace(true) {
            warning!("jobq: deferred wake-ups wait: the NOTIFY queue is over half full (a listener stopped reading?)");
        }
    } else if SKIPPING.replace(false) {
        log!("jobq: deferred wake-ups are sent again");
    }
}

#[pg_schema]
mod jobq {
    use pgrx::prelude::*;

    /// Wakes the listeners of `queue` (`NOTIFY jobq, queue`): now, or through the background
    /// worker after this transaction commits, as `jobq.notify` says.
    #[pg_extern(volatile, parallel_unsafe, name = "_notify")]
    pub fn notify(queue: &str) {
        super::notify(queue);
    }
}
