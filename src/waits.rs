//! The checkout that waits inside the server: `jobq_checkout(..., wait)`.
//!
//! A call that found nothing registers as a waiter in shared memory (its database, its
//! queues, its worker, its latch) and sleeps on its latch. The transaction that makes jobs
//! available rings at its COMMIT (src/xact.rs), once they are visible: every function that
//! makes a job waiting goes through `jobq._enter_ready`, whose floor notes (src/floors.rs) name
//! the queue, the run_at and the number of jobs; `jobq._wake` (resume, a changed rate limit, …)
//! names the queue too, or every queue. A ring for jobs due now wakes at most as many waiters
//! of that queue as jobs came (a herd of 64 waiters costs one checkout for one job, not 64); a
//! ring for a job due later only moves the waiters' alarm earlier, without waking them to check
//! out. The waiter also wakes by itself when the earliest scheduled job of its queues comes due
//! (`due`, read at each look), and looks again at least once a second whatever happens (the net
//! under what nothing announces).
//!
//! What holds back a due job, and what lets it go:
//! - A key's slots (a concurrency key's, a while_executing key's), freed by a job of any queue.
//!   A look that found due jobs held back by keys names them to `_wait` (`keys`, up to KEYS;
//!   more and any freed key concerns it). A freed slot, numbered (`Waits::seq`), rings one
//!   sleeping waiter that named its key. When none sleeps (each is in a look, whose snapshot may
//!   have come before the free), the free is remembered instead in a bucket of its key
//!   (`Waits::freed`), and the first waiter whose `_wait` finds one of its keys freed since its
//!   look began (`look`) takes it (`Waits::unclaimed`) and looks again at once. A waiter that
//!   was given a free and whose look then took nothing (its job needed another key too, or its
//!   queue is paused) passes it on (`pass_on`) to the next sleeping waiter that named the key.
//!   So one free costs one look while someone can use it, not one per waiter.
//! - A full rate window, which opens when its oldest starts leave it. The look names the
//!   earliest opening (`rate`, `opens`) and how many starts leave then (`opening`); at that
//!   moment as many waiters look again, the first to get there (`Waits::opened`); the others
//!   sleep on, and one of them gets the opening when a waiter's look could not use it.
//!
//! While it sleeps the waiter holds no snapshot: it clears its xmin (`MyProc->xmin`) so that
//! vacuum's horizon is not held back, and its next statement takes a new snapshot. (Only the
//! snapshots of the statement that called jobq_checkout stay registered, unused: a client must
//! not read other tables in the same statement as a waiting checkout. This is safe only under
//! READ COMMITTED, which the wait requires: src/compact.rs relies on every snapshot being
//! covered by some xmin.) It holds no row lock either: jobq_checkout rolls back, in a
//! subtransaction, whatever an attempt locked without claiming it. It stops at once on a query
//! cancel or `statement_timeout` (interrupts are checked at every wake), leaves with FATAL when
//! its client has gone, and its worker counts as alive: each reap pass refreshes the heartbeat
//! of the workers waiting in its database (`jobq._waiting_workers()`, used by jobq._reap).
//!
//! Without the preload there is no shared memory: the call looks again every 100 ms.
use crate::my_db;
use crate::xact::Notes;
use pgrx::prelude::*;
use pgrx::{pg_shmem_init, PGRXSharedMemory, PgAtomic, PgLwLock};
use std::cell::Cell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

/// Calls waiting at once, over all databases; one more waits like a call without the preload.
const WAITERS: usize = 256;
/// Queues a waiter names; more (or none: every queue) and it is woken for every queue.
const QUEUES: usize = 8;
/// Without the preload, or with every waiter slot taken: the interval between two looks.
pub const POLL_MS: i64 = 100;
/// The longest a waiter sleeps without looking again.
const NET_MS: i64 = 1000;
/// Keys a waiter names; more and any freed key concerns it.
const KEYS: usize = 8;
/// Buckets of (database, key) for freed keys and rate windows opened. Two keys that share one
/// may take each other's remembered free or opening, which then waits for a once-a-second look.
const BUCKETS: usize = 4096;
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
    looking: bool,         // between the return of `_wait` (or `_wait_begin`) and the next `_wait`
    look: u64,             // `Waits::seq` when its current or last look began
    any_key: bool,         // its last look found due jobs held back by more than KEYS keys
    nk: u8,
    keys: [u32; KEYS], // hashes of the keys that held back due jobs at its last look
    opens: i64,        // TimestampTz when the rate window that held back a due job opens
    rate: usize,       // that window's bucket
    opening: u32,      // how many starts leave that window then
    freed: Option<(u32, u64)>, // the freed key (hash, seq) it was rung for, until its look ends
    given: Option<(usize, i64)>, // the rate opening (bucket, time) it looks for, until its look ends
    lost: Option<(usize, i64)>,  // the rate opening other waiters took before it got there
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
    looking: true,
    look: 0,
    any_key: false,
    nk: 0,
    keys: [0; KEYS],
    opens: NEVER,
    rate: 0,
    opening: 0,
    freed: None,
    given: None,
    lost: None,
};

impl Waiter {
    fn wants_queue(&self, h: Option<u32>) -> bool {
        h.is_none_or(|h| self.any || self.queues[..self.nq as usize].contains(&h))
    }
    /// Sleeping in database `db`, not yet rung.
    fn asleep_in(&self, db: u32) -> bool {
        self.pid != 0 && self.db == db && !self.looking && !self.rung
    }
}

#[derive(Copy, Clone)]
struct Waits {
    waiters: [Waiter; WAITERS],
    seq: u64,                // slots freed so far (each free's number)
    freed: [u64; BUCKETS],   // per bucket of (database, key): the `seq` of its last remembered free
    unclaimed: [u32; BUCKETS], // and how many of its remembered frees no waiter took
    opened: [(i64, u32); BUCKETS], // per bucket of (database, rate key): the last opening waiters took, and how many
}
unsafe impl PGRXSharedMemory for Waits {}

static WAITS: PgLwLock<Waits> = unsafe { PgLwLock::new(c"jobq_waits") };
/// How many slots are taken: a commit rings only when some call waits (the common case, no
/// waiter, costs one atomic read instead of the lock).
static WAITING: PgAtomic<AtomicU32> = unsafe { PgAtomic::new(c"jobq_waiting") };
static ENABLED: AtomicBool = AtomicBool::new(false);

/// Called from _PG_init while preloading.
pub fn init() {
    pg_shmem_init!(WAITS = Waits { waiters: [FREE; WAITERS], seq: 0, freed: [0; BUCKETS], unclaimed: [0; BUCKETS], opened: [(i64::MIN, 0); BUCKETS] });
    pg_shmem_init!(WAITING);
    ENABLED.store(true, Ordering::Relaxed);
}

/// What a transaction made available.
pub(crate) enum Made {
    /// `jobs` jobs of the queue whose hash is `queue` (None: of every queue), due at `run_at`.
    Jobs { queue: Option<u32>, run_at: i64, jobs: i64 },
    /// A slot of the key whose hash this is (`key_hash`), for a job of any queue.
    Freed(u32),
    /// The worker with this id stops checking out (`jobq_stop_checkouts`): its waiting calls
    /// look again at once, find its row marked and return.
    Stop([u8; 16]),
}

thread_local! {
    /// What this transaction made available, rung at its commit.
    pub(crate) static PENDING: Notes<Made> = const { Notes::new() };
    /// This backend's waiter slot, while its transaction waits.
    static MINE: Cell<Option<usize>> = const { Cell::new(None) };
}

/// FNV-1a over `parts` one after the other: a collision only wakes a waiter for nothing.
fn hash(parts: &[&[u8]]) -> u32 {
    parts.iter().flat_map(|p| p.iter()).fold(0x811c_9dc5u32, |h, &b| (h ^ b as u32).wrapping_mul(0x0100_0193))
}

/// A key as `_freed` and `_wait` name it: its namespace (`c` a concurrency key, `u` a
/// while_executing key) and the key.
pub(crate) fn key_hash(ns: u8, key: &[u8]) -> u32 {
    hash(&[&[ns], key])
}

/// The bucket of key hash `key` in database `db` (`Waits::freed`, `Waits::opened`). `ANY`: the
/// bucket of every key of the database, for the waiters that named too many.
fn bucket(db: u32, key: u32) -> usize {
    ((db as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ key as u64) as usize % BUCKETS
}
const ANY: u32 = 0;

/// Marks waiter `i` as looking again, from now: a free remembered after this concerns it.
fn begin_look(w: &mut Waits, i: usize) {
    let seq = w.seq;
    let x = &mut w.waiters[i];
    x.looking = true;
    x.look = seq;
    x.rung = false;
}

/// The `seq`th free, of a slot of the key whose hash is `k`, in database `db`: rings one
/// sleeping waiter that named the key and looked before it (exact names first), which holds it
/// until its look ends (`pass_on`). Remembered for the waiters in a look unless it rang an
/// exact name (a waiter that named too many keys may well not need this one).
fn give_key(w: &mut Waits, db: u32, k: u32, seq: u64, latches: &mut Vec<usize>) {
    let can = |x: &Waiter| x.asleep_in(db) && x.look < seq;
    let exact = w.waiters.iter().position(|x| can(x) && x.keys[..x.nk as usize].contains(&k));
    if let Some(i) = exact.or_else(|| w.waiters.iter().position(|x| can(x) && x.any_key)) {
        w.waiters[i].rung = true;
        w.waiters[i].freed = Some((k, seq));
        latches.push(w.waiters[i].latch);
    }
    if exact.is_none() {
        // Earlier frees of a bucket count on only if a look under way began before the last of
        // them (else no waiter can take them).
        let oldest_look = w.waiters.iter().filter(|x| x.pid != 0 && x.db == db && x.looking).map(|x| x.look).min();
        let (b, any) = (bucket(db, k), bucket(db, ANY));
        for b in std::iter::once(b).chain((any != b).then_some(any)) {
            let earlier = if oldest_look.is_some_and(|l| w.freed[b] > l) { w.unclaimed[b] } else { 0 };
            w.freed[b] = w.freed[b].max(seq);
            w.unclaimed[b] = (earlier + 1).min(WAITERS as u32);
        }
    }
}

/// Waiter `i`'s look took nothing: the free or the rate opening it looked for goes to the next
/// waiter that may use it.
fn pass_on(w: &mut Waits, i: usize, latches: &mut Vec<usize>) {
    let x = w.waiters[i];
    w.waiters[i].freed = None;
    w.waiters[i].given = None;
    if let Some((k, seq)) = x.freed {
        give_key(w, x.db, k, seq, latches);
    }
    if let Some((rate, at)) = x.given {
        match w.waiters.iter().position(|y| y.asleep_in(x.db) && y.lost == Some((rate, at))) {
            Some(j) => {
                let y = &mut w.waiters[j];
                y.rung = true;
                y.lost = None;
                y.given = Some((rate, at));
                latches.push(y.latch);
            }
            // Nobody lost it: given back, for a waiter still to get there.
            None if w.opened[rate].0 == at && w.opened[rate].1 > 0 => w.opened[rate].1 -= 1,
            None => {}
        }
    }
}

fn set_latches(mut latches: Vec<usize>) {
    latches.sort_unstable();
    latches.dedup();
    for l in latches {
        unsafe { pg_sys::SetLatch(l as *mut pg_sys::Latch) };
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
        // Due now: per queue, the number of jobs is the number of waiters to wake.
        let mut due_now: HashMap<Option<u32>, i64> = HashMap::new();
        for m in notes {
            match *m {
                Made::Freed(k) => {
                    w.seq += 1;
                    let seq = w.seq;
                    give_key(&mut w, db, k, seq, &mut latches);
                }
                Made::Stop(worker) => {
                    for x in w.waiters.iter_mut().filter(|x| x.pid != 0 && x.db == db && x.worker == worker) {
                        x.rung = true;
                        latches.push(x.latch);
                    }
                }
                Made::Jobs { queue, run_at, jobs } if run_at <= now => *due_now.entry(queue).or_insert(0) += jobs,
                Made::Jobs { queue, run_at, .. } => {
                    for x in w.waiters.iter_mut().filter(|x| x.pid != 0 && x.db == db) {
                        if x.wants_queue(queue) && run_at < x.due {
                            x.due = run_at; // its alarm moves earlier; it need not check out now
                            latches.push(x.latch);
                        }
                    }
                }
            }
        }
        for (h, mut n) in due_now {
            for x in w.waiters.iter_mut().filter(|x| x.pid != 0 && x.db == db && !x.rung) {
                if n <= 0 {
                    break;
                }
                if x.wants_queue(h) {
                    x.rung = true;
                    latches.push(x.latch);
                    n -= 1;
                }
            }
        }
    }
    set_latches(latches);
}

/// At the end of the transaction: the waiter slot of this backend is free again.
pub(crate) fn leave() {
    leave_passing(false);
}

/// Frees this backend's waiter slot; with `pass`, its last look took nothing, so what it was
/// rung for goes on to another waiter first (`pass_on`).
fn leave_passing(pass: bool) {
    if let Some(i) = MINE.take() {
        let mut latches = Vec::new();
        let mut w = WAITS.exclusive();
        if w.waiters[i].pid == unsafe { pg_sys::MyProcPid } {
            if pass {
                pass_on(&mut w, i, &mut latches);
            }
            w.waiters[i] = FREE;
            WAITING.get().fetch_sub(1, Ordering::AcqRel);
        }
        drop(w);
        set_latches(latches);
    }
}

unsafe extern "C" {
    /// PostgreSQL 14+: false when the client's socket is closed (not in pgrx's bindings).
    fn pq_check_connection() -> bool;
}

/// `jobq._wake` for Rust callers (`run_at` a TimestampTz; i64::MIN is '-infinity').
pub(crate) fn wake_at_commit(queue: Option<&[u8]>, run_at: i64, jobs: i64) -> bool {
    note(Made::Jobs { queue: queue.map(|q| hash(&[q])), run_at, jobs })
}

/// `jobq._freed` for Rust callers (`key` from `key_hash`).
pub(crate) fn freed_at_commit(key: u32) -> bool {
    note(Made::Freed(key))
}

/// Keeps `made` for the commit; false (nothing kept) without the preload.
fn note(made: Made) -> bool {
    if !ENABLED.load(Ordering::Relaxed) {
        return false;
    }
    PENDING.with(|p| p.update(|p| p.push(made)));
    true
}

#[pg_schema]
pub mod jobq {
    use super::*;

    /// Notes that `jobs` jobs of `queue` (NULL: of every queue) become available at `run_at`
    /// once this transaction commits; the waiting checkouts are rung then. Nothing happens
    /// without the preload. True when noted. (A value, so that PL/pgSQL can call it as an
    /// expression: docs/internals.md, "CPU per job: what each step saved".)
    #[pg_extern(volatile, parallel_safe, name = "_wake")]
    pub fn wake(queue: Option<&str>, run_at: TimestampWithTimeZone, jobs: i64) -> bool {
        super::wake_at_commit(queue.map(str::as_bytes), run_at.into_inner(), jobs)
    }

    /// Notes that a slot of `key` (`c` and a concurrency key, or `u` and a while_executing key)
    /// is free once this transaction commits: a waiting checkout that key held back, in any
    /// queue, is rung then. Nothing happens without the preload. True when noted.
    #[pg_extern(volatile, parallel_safe, name = "_freed")]
    pub fn freed(key: &str) -> bool {
        super::freed_at_commit(hash(&[key.as_bytes()]))
    }

    /// Notes that `worker` stops checking out (jobq_stop_checkouts) once this transaction
    /// commits: its waiting calls in this database are rung then, and find its row marked.
    /// Nothing happens without the preload (a waiting call looks at the row every POLL_MS).
    /// True when noted.
    #[pg_extern(volatile, name = "_stop_checkouts")]
    pub fn stop_checkouts(worker: pgrx::Uuid) -> bool {
        super::note(Made::Stop(*worker.as_bytes()))
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
                me.queues[i] = hash(&[q.as_bytes()]);
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
        w.waiters[i] = me;
        begin_look(&mut w, i); // its first look begins now
        drop(w);
        MINE.set(Some(i));
        crate::xact::watch();
        true
    }

    /// Sleeps until this waiter is rung, `due` (the earliest scheduled job of its queues, or
    /// NULL) comes, `opens` (the earliest opening of a full rate window `rate` that held back one
    /// of their due jobs, when `opening` starts leave it; or NULL) comes and fewer than `opening`
    /// waiters got there first, `until` passes, or a second went by. Returns at once if it was
    /// rung since its last look, or if one of `keys` (the keys, as `_freed` names them, that held
    /// back due jobs at that look) was freed with no sleeping waiter to ring since the look
    /// began. What its look was rung for and did not use goes to another waiter first. Without
    /// a waiter slot it sleeps POLL_MS. Holds no snapshot meanwhile.
    #[pg_extern(volatile, name = "_wait")]
    pub fn wait(
        until: TimestampWithTimeZone,
        due: Option<TimestampWithTimeZone>,
        keys: default!(Option<Vec<Option<String>>>, "NULL"),
        rate: default!(Option<&str>, "NULL"),
        opens: default!(Option<TimestampWithTimeZone>, "NULL"),
        opening: default!(i32, 1),
    ) {
        let until: i64 = until.into_inner();
        let mine = MINE.get();
        if let Some(i) = mine {
            let keys: Vec<u32> = keys.unwrap_or_default().iter().flatten().map(|k| hash(&[k.as_bytes()])).collect();
            let mut latches = Vec::new();
            let mut w = WAITS.exclusive();
            pass_on(&mut w, i, &mut latches);
            let (db, look) = (w.waiters[i].db, w.waiters[i].look);
            // A key freed while the look was under way rang nobody: the first waiter to find it
            // takes it and looks again. (More than KEYS keys: any key of the database.)
            let mut claim = |k: u32| {
                let b = bucket(db, k);
                let mine = w.freed[b] > look && w.unclaimed[b] > 0;
                if mine {
                    w.unclaimed[b] -= 1;
                }
                mine
            };
            let missed = if keys.len() > KEYS { claim(ANY) } else { keys.iter().any(|&k| claim(k)) };
            let x = &mut w.waiters[i];
            if let Some(d) = due {
                x.due = x.due.min(d.into_inner());
            }
            x.any_key = keys.len() > KEYS;
            x.nk = if x.any_key { 0 } else { keys.len() as u8 };
            x.keys[..x.nk as usize].copy_from_slice(&keys[..x.nk as usize]);
            x.opens = opens.map_or(NEVER, |o| o.into_inner());
            x.rate = bucket(db, rate.map_or(ANY, |r| hash(&[r.as_bytes()])));
            x.opening = opening.max(1) as u32;
            x.lost = None;
            x.looking = false; // asleep from here: rings for its keys reach it
            if missed {
                begin_look(&mut w, i);
            }
            drop(w);
            set_latches(latches);
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
                    let x = w.waiters[i];
                    // Rung; a scheduled job due; a rate window open, reached by fewer waiters
                    // than starts leave it.
                    let mut go = x.rung || x.due <= now;
                    if x.opens <= now {
                        let (at, n) = w.opened[x.rate];
                        let taken = if at == x.opens { n } else if at < x.opens { 0 } else { u32::MAX };
                        if taken < x.opening {
                            w.opened[x.rate] = (x.opens, taken + 1);
                            w.waiters[i].given = Some((x.rate, x.opens));
                            go = true;
                        } else {
                            w.waiters[i].lost = Some((x.rate, x.opens));
                        }
                        w.waiters[i].opens = NEVER;
                    }
                    if go || now >= until.min(start + NET_MS * 1000) {
                        if x.due <= now {
                            w.waiters[i].due = NEVER;
                        }
                        begin_look(&mut w, i);
                        return;
                    }
                    until.min(x.due).min(w.waiters[i].opens).min(start + NET_MS * 1000)
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
            if unsafe { pg_sys::InterruptPending } != 0 {
                // An error here (a cancel, statement_timeout) may be caught by a savepoint and
                // the transaction go on with this slot: not as a sleeper that rings should reach.
                if let Some(i) = mine {
                    WAITS.exclusive().waiters[i].looking = true;
                }
                pgrx::check_for_interrupts!();
                if let Some(i) = mine {
                    WAITS.exclusive().waiters[i].looking = false;
                }
            }
        }
    }

    /// Ends this transaction's waiting call (as its end would): its slot is free again. With
    /// `took_nothing` (the call ran out), what its last look was rung for and could not use goes
    /// on to another waiter.
    #[pg_extern(volatile, name = "_wait_end")]
    pub fn wait_end(took_nothing: bool) {
        super::leave_passing(took_nothing);
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
