//! The checkout that waits inside the server: `jobq_checkout(..., wait)`.
//!
//! A call that found nothing registers as a waiter in shared memory (its database, its
//! queues, its worker, its latch) and sleeps on its latch. The transaction that makes jobs
//! available rings at its COMMIT (src/xact.rs), once they are visible: every function that
//! makes a job waiting goes through `jobq._enter_ready`, whose floor notes (src/floors.rs) name
//! the queue, the run_at and the number of jobs; `jobq._notify` (resume, a freed slot, …) names
//! the queue too. A ring for jobs due now wakes at most as many waiters of that queue as jobs
//! came (a herd of 64 waiters costs one checkout for one job, not 64); a ring for a job due
//! later only moves the waiters' alarm earlier, without waking them to check out. The waiter
//! also wakes by itself when the earliest scheduled job of its queues comes due, or the
//! earliest rate window that holds back one of its due jobs opens (both `due`, read at each
//! look), and looks again at least once a second whatever happens (the net under what no
//! commit announces).
//!
//! A freed slot (a concurrency key's, a while_executing key's) lets a job of any queue with
//! that key start, not only of the finished job's queue. So a look that found due jobs held
//! back by keys names them to `_wait` (`keys`), and a freed slot's ring wakes the waiters that
//! named its key first, then the waiters of the finished job's queue. A slot freed between a
//! look and its `_wait` would ring nobody: every freed key is also written, numbered, into a
//! short history (`freed`), and `_wait` returns at once when a key it names was freed since the
//! look began (`look`).
//!
//! While it sleeps the waiter holds no snapshot: it clears its xmin (`MyProc->xmin`) so that
//! vacuum's horizon is not held back, and its next statement takes a new snapshot. (Only the
//! snapshots of the statement that called jobq_checkout stay registered, unused: a client must
//! not read other tables in the same statement as a waiting checkout.) It holds no row lock
//! either: jobq_checkout rolls back, in a subtransaction, whatever an attempt locked without
//! claiming it. It stops at once on a query cancel or `statement_timeout` (interrupts are
//! checked at every wake), leaves with FATAL when its client has gone, and its worker counts as
//! alive: each reap pass refreshes the heartbeat of the workers waiting in its database
//! (`jobq._waiting_workers()`, used by jobq._reap).
//!
//! Without the preload there is no shared memory: the call looks again every 100 ms.
use crate::my_db;
use crate::xact::Notes;
use pgrx::prelude::*;
use pgrx::{pg_shmem_init, PGRXSharedMemory, PgAtomic, PgLwLock};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

/// Calls waiting at once, over all databases; one more waits like a call without the preload.
const WAITERS: usize = 256;
/// Queues a waiter names; more (or none: every queue) and it is woken for every queue.
const QUEUES: usize = 8;
/// Without the preload, or with every waiter slot taken: the interval between two looks.
pub const POLL_MS: i64 = 100;
/// The longest a waiter sleeps without looking again.
const NET_MS: i64 = 1000;
/// Keys a waiter names; more and any freed key wakes it.
const KEYS: usize = 8;
/// Freed keys remembered for the waiters whose look was under way (`Waits::freed`).
const FREED: usize = 256;
const NEVER: i64 = i64::MAX;

#[derive(Copy, Clone)]
struct Waiter {
    pid: i32, // 0: free
    db: u32,
    latch: usize,
    worker: [u8; 16],
    any: bool,
    nq: u8,
    queues: [u32; QUEUES], // hashes of the queue names
    rung: bool,            // jobs may be there: check out again
    due: i64,              // TimestampTz when the earliest scheduled job it knows of comes due
    any_key: bool,         // its last look found due jobs held back by more than KEYS keys
    nk: u8,
    keys: [u32; KEYS], // hashes of the keys that held back due jobs at its last look
    look: u64,         // `Waits::seq` when its last look began
}

const FREE: Waiter = Waiter {
    pid: 0,
    db: 0,
    latch: 0,
    worker: [0; 16],
    any: false,
    nq: 0,
    queues: [0; QUEUES],
    rung: false,
    due: NEVER,
    any_key: false,
    nk: 0,
    keys: [0; KEYS],
    look: 0,
};

/// A slot freed by a commit: the `seq`th, in database `db`, of the key whose hash is `key`.
#[derive(Copy, Clone)]
struct Freed {
    seq: u64,
    db: u32,
    key: u32,
}

#[derive(Copy, Clone)]
struct Waits {
    waiters: [Waiter; WAITERS],
    seq: u64,                // freed keys so far
    freed: [Freed; FREED], // the last FREED of them, the `seq`th at `seq % FREED`
}
unsafe impl PGRXSharedMemory for Waits {}

static WAITS: PgLwLock<Waits> = unsafe { PgLwLock::new(c"jobq_waits") };
/// How many slots are taken: a commit rings only when some call waits (the common case, no
/// waiter, costs one atomic read instead of the lock).
static WAITING: PgAtomic<AtomicU32> = unsafe { PgAtomic::new(c"jobq_waiting") };
static ENABLED: AtomicBool = AtomicBool::new(false);

/// Called from _PG_init while preloading.
pub fn init() {
    pg_shmem_init!(WAITS = Waits { waiters: [FREE; WAITERS], seq: 0, freed: [Freed { seq: 0, db: 0, key: 0 }; FREED] });
    pg_shmem_init!(WAITING);
    ENABLED.store(true, Ordering::Relaxed);
}

thread_local! {
    /// What this transaction made available, rung at its commit.
    pub(crate) static PENDING: Notes<Made> = const { Notes::new() };
    /// This backend's waiter slot, while its transaction waits.
    static MINE: Cell<Option<usize>> = const { Cell::new(None) };
}

/// What a transaction made available: `jobs` jobs of `queue` (None: of every queue) at
/// `run_at`, or, with `key`, slots of that key freed by a finished job of `queue`.
pub(crate) struct Made {
    queue: Option<String>,
    key: Option<String>, // 'c' and a concurrency key, or 'u' and a while_executing key
    run_at: i64,
    jobs: i64,
}

fn hash(queue: &str) -> u32 {
    // FNV-1a: a collision only wakes a waiter for nothing.
    queue.bytes().fold(0x811c_9dc5u32, |h, b| (h ^ b as u32).wrapping_mul(0x0100_0193))
}

impl Waiter {
    fn wants_queue(&self, h: Option<u32>) -> bool {
        h.is_none_or(|h| self.any || self.queues[..self.nq as usize].contains(&h))
    }
    fn wants_key(&self, k: u32) -> bool {
        self.any_key || self.keys[..self.nk as usize].contains(&k)
    }
}

/// At commit: wakes the waiters of what was noted. Nothing here may fail.
pub(crate) fn ring(notes: &[Made]) {
    if WAITING.get().load(Ordering::Acquire) == 0 {
        return;
    }
    let db = my_db();
    let now = unsafe { pg_sys::GetCurrentTimestamp() };
    let mut latches = Vec::new();
    {
        let mut w = WAITS.exclusive();
        // Due now: per queue (and freed key), the number of jobs is the number of waiters to
        // wake. (hash of the queue or None for every queue, hash of the key, jobs)
        let mut due_now: Vec<(Option<u32>, Option<u32>, i64)> = Vec::new();
        for m in notes {
            let (h, k) = (m.queue.as_deref().map(hash), m.key.as_deref().map(hash));
            if let Some(key) = k {
                w.seq += 1;
                let seq = w.seq;
                w.freed[(seq % FREED as u64) as usize] = Freed { seq, db, key };
            }
            if m.run_at <= now {
                match due_now.iter_mut().find(|(q, key, _)| *q == h && *key == k) {
                    Some((_, _, n)) => *n = n.saturating_add(m.jobs),
                    None => due_now.push((h, k, m.jobs)),
                }
            } else {
                for x in w.waiters.iter_mut().filter(|x| x.pid != 0 && x.db == db) {
                    if x.wants_queue(h) && m.run_at < x.due {
                        x.due = m.run_at; // its alarm moves earlier; it need not check out now
                        latches.push(x.latch);
                    }
                }
            }
        }
        for (h, k, mut n) in due_now {
            // The waiters held back by a freed key first (of any queue), then its queue's.
            let passes: [&dyn Fn(&Waiter) -> bool; 2] = [&|x| k.is_some_and(|k| x.wants_key(k)), &|x| x.wants_queue(h)];
            for wanted in passes {
                for x in w.waiters.iter_mut().filter(|x| x.pid != 0 && x.db == db && !x.rung) {
                    if n <= 0 {
                        break;
                    }
                    if wanted(x) {
                        x.rung = true;
                        latches.push(x.latch);
                        n -= 1;
                    }
                }
            }
        }
    }
    latches.sort_unstable();
    latches.dedup();
    for l in latches {
        unsafe { pg_sys::SetLatch(l as *mut pg_sys::Latch) };
    }
}

/// At the end of the transaction: the waiter slot of this backend is free again.
pub(crate) fn leave() {
    if let Some(i) = MINE.take() {
        let mut w = WAITS.exclusive();
        if w.waiters[i].pid == unsafe { pg_sys::MyProcPid } {
            w.waiters[i] = FREE;
            WAITING.get().fetch_sub(1, Ordering::AcqRel);
        }
    }
}

unsafe extern "C" {
    /// PostgreSQL 14+: false when the client's socket is closed (not in pgrx's bindings).
    fn pq_check_connection() -> bool;
}

/// `jobq._wake` for Rust callers (`run_at` a TimestampTz; i64::MIN is '-infinity'; `key`
/// the freed slots' key, with its namespace first: `c` or `u`).
pub(crate) fn wake_at_commit(queue: Option<&str>, key: Option<String>, run_at: i64, jobs: i64) -> bool {
    if !ENABLED.load(Ordering::Relaxed) {
        return false;
    }
    let note = Made { queue: queue.map(str::to_owned), key, run_at, jobs };
    PENDING.with(|p| p.update(|p| p.push(note)));
    true
}

#[pg_schema]
pub mod jobq {
    use super::*;

    /// Notes that `jobs` jobs of `queue` (NULL: of every queue) become available at `run_at`
    /// once this transaction commits; the waiting checkouts are rung then. With `key` (`c` and
    /// a concurrency key, or `u` and a while_executing key), `jobs` slots of that key were
    /// freed by a job of `queue`: the waiters held back by that key are rung first. Nothing
    /// happens without the preload. True when noted. (A value, so that PL/pgSQL can call it as
    /// an expression: README, Performance.)
    #[pg_extern(volatile, parallel_safe, name = "_wake")]
    pub fn wake(queue: Option<&str>, run_at: TimestampWithTimeZone, jobs: i64, key: default!(Option<&str>, "NULL")) -> bool {
        super::wake_at_commit(queue, key.map(str::to_owned), run_at.into_inner(), jobs)
    }

    /// Registers this call as a waiter for `queues` (NULL: every queue) of `worker`, until
    /// the end of the transaction. False without the preload or with every slot taken:
    /// then `_wait` sleeps POLL_MS at a time.
    #[pg_extern(volatile, name = "_wait_begin")]
    pub fn wait_begin(worker: pgrx::Uuid, queues: Option<Vec<Option<String>>>) -> bool {
        if !ENABLED.load(Ordering::Relaxed) {
            return false;
        }
        let pid = unsafe { pg_sys::MyProcPid };
        let names: Vec<String> = queues.unwrap_or_default().into_iter().flatten().collect();
        let mut me = FREE;
        me.pid = pid;
        me.db = my_db();
        me.latch = unsafe { pg_sys::MyLatch } as usize;
        me.worker.copy_from_slice(worker.as_bytes());
        me.any = names.is_empty() || names.len() > QUEUES;
        if !me.any {
            for (i, q) in names.iter().enumerate() {
                me.queues[i] = hash(q);
            }
            me.nq = names.len() as u8;
        }
        let mut w = WAITS.exclusive();
        // Its own slot first (a second waiting call in one transaction), else a free one.
        let own = MINE.get().filter(|i| w.waiters[*i].pid == pid);
        let Some(i) = own.or_else(|| w.waiters.iter().position(|x| x.pid == 0)) else { return false };
        if w.waiters[i].pid == 0 {
            WAITING.get().fetch_add(1, Ordering::AcqRel);
        }
        me.look = w.seq; // its first look begins now
        w.waiters[i] = me;
        drop(w);
        MINE.set(Some(i));
        crate::xact::watch();
        true
    }

    /// Sleeps until this waiter is rung, `due` (the earliest moment a job of its queues comes
    /// due or a rate window holding one back opens, or NULL) comes, `until` passes, or a second
    /// went by; returns at once if it was rung since its last look, or if one of `keys` (the
    /// keys, as `_wake` names them, that held back due jobs at that look) was freed since the
    /// look began. Without a waiter slot it sleeps POLL_MS. Holds no snapshot meanwhile.
    #[pg_extern(volatile, name = "_wait")]
    pub fn wait(until: TimestampWithTimeZone, due: Option<TimestampWithTimeZone>, keys: default!(Option<Vec<Option<String>>>, "NULL")) {
        let until: i64 = until.into_inner();
        let mine = MINE.get();
        if let Some(i) = mine {
            let keys: Vec<u32> = keys.unwrap_or_default().iter().flatten().map(|k| hash(k)).collect();
            let mut w = WAITS.exclusive();
            let (seq, db) = (w.seq, w.waiters[i].db);
            let x = &mut w.waiters[i];
            if let Some(d) = due {
                x.due = x.due.min(d.into_inner());
            }
            x.any_key = keys.len() > KEYS;
            x.nk = if x.any_key { 0 } else { keys.len() as u8 };
            x.keys[..x.nk as usize].copy_from_slice(&keys[..x.nk as usize]);
            // A key freed since the look began rang before this waiter named it: look again.
            // (More freed than remembered: any of them may have been one.)
            let x = w.waiters[i];
            let missed = !keys.is_empty()
                && (seq - x.look > FREED as u64
                    || (x.look + 1..=seq).any(|s| {
                        let f = w.freed[(s % FREED as u64) as usize];
                        f.seq == s && f.db == db && x.wants_key(f.key)
                    }));
            w.waiters[i].look = seq; // its next look begins when this call returns
            if missed {
                return;
            }
        }
        let start = unsafe { pg_sys::GetCurrentTimestamp() };
        loop {
            let now = unsafe { pg_sys::GetCurrentTimestamp() };
            let alarm = match mine {
                Some(i) => {
                    let mut w = WAITS.exclusive();
                    let seq = w.seq;
                    let x = &mut w.waiters[i];
                    x.look = seq;
                    if std::mem::take(&mut x.rung) {
                        return;
                    }
                    if x.due <= now {
                        x.due = NEVER;
                        return;
                    }
                    until.min(x.due).min(start + NET_MS * 1000)
                }
                None => until.min(start + POLL_MS * 1000),
            };
            if now >= alarm {
                return;
            }
            unsafe {
                // No snapshot while asleep: the next statement takes a new one.
                pg_sys::InvalidateCatalogSnapshot();
                (*pg_sys::MyProc).xmin = pg_sys::InvalidTransactionId;
                pg_sys::WaitLatch(
                    pg_sys::MyLatch,
                    (pg_sys::WL_LATCH_SET | pg_sys::WL_TIMEOUT | pg_sys::WL_EXIT_ON_PM_DEATH) as i32,
                    ((alarm - now) / 1000).max(1) as _,
                    pg_sys::PG_WAIT_EXTENSION,
                );
                pg_sys::ResetLatch(pg_sys::MyLatch);
                // Only a backend serving a client has a connection to check (a background
                // worker calling this has none, and the check would crash it).
                if !pg_sys::MyProcPort.is_null() && !pq_check_connection() {
                    pg_sys::ClientConnectionLost = 1;
                    pg_sys::InterruptPending = 1;
                }
            }
            pgrx::check_for_interrupts!();
        }
    }

    /// The workers waiting in this database's calls now: jobq._reap refreshes their
    /// heartbeats, since a worker counts as alive while it waits.
    #[pg_extern(volatile, name = "_waiting_workers")]
    pub fn waiting_workers() -> Vec<pgrx::Uuid> {
        if !ENABLED.load(Ordering::Relaxed) {
            return Vec::new();
        }
        let db = my_db();
        WAITS.share().waiters.iter().filter(|x| x.pid != 0 && x.db == db).map(|x| pgrx::Uuid::from_bytes(x.worker)).collect()
    }
}
