//! Per-queue, per-minute counters for dashboards: jobs enqueued, started, completed, failed
//! and dead, with histograms of wait time (from due to started) and run time (from started to
//! the end of the attempt). Read through `jobq.throughput()` (src/sql/counters.sql).
//!
//! Kept as jobs move, without a table write on the hot path: the functions that move a job
//! call `jobq._tally`, which adds to this backend's notes; at COMMIT (src/xact.rs) the notes
//! are added to shared memory, and every reap pass moves this database's counts into the
//! table `jobq.queue_minutes` (`jobq._take_tallies`). Exact for what commits:
//! - what a transaction or subtransaction that rolls back noted is dropped with it;
//! - counts a pass took out of shared memory go back there when the pass's transaction (or
//!   the subtransaction it ran in) does not commit;
//! - a prepared transaction counts at PREPARE.
//!
//! What is lost: what sat in shared memory at a crash (at most a reap interval's worth), and,
//! when more than 1,024 queue-minutes wait for a pass (a database whose background worker
//! does not run, more than 1,024 active queues), the oldest minute's counts, to make room;
//! and the jobs of queues whose names are longer than 200 bytes. Without the preload nothing
//! is counted.
use crate::xact::Notes;
use pgrx::prelude::*;
use pgrx::{pg_shmem_init, PGRXSharedMemory, PgLwLock};
use std::sync::atomic::{AtomicBool, Ordering};

const ENTRIES: usize = 1024;
/// Longer queue names (jobq_enqueue allows 1,000 bytes) are not counted: shared memory
/// holds 1,024 entries, and its initial value is built on the postmaster's stack.
const QUEUE_MAX: usize = 200;
const USECS_PER_MINUTE: i64 = 60_000_000;

pub const BUCKETS: usize = 24;
/// The histograms' buckets: upper bounds in milliseconds (a duration d falls in the first
/// bucket with d <= bound); the last is unbounded.
pub const BOUNDS_MS: [f64; BUCKETS] = [
    1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1e3, 2e3, 5e3, 1e4, 2e4, 6e4, 12e4, 3e5,
    6e5, 18e5, 36e5, 72e5, 216e5, 864e5, f64::INFINITY,
];

const EVENTS: [&str; 5] = ["enqueued", "started", "completed", "failed", "dead"];

#[derive(Copy, Clone, PartialEq, Debug)]
pub struct Counts {
    n: [i64; 5], // in the order of EVENTS
    wait: [i64; BUCKETS],
    run: [i64; BUCKETS],
    wait_us: i64, // the histograms' sums, in microseconds
    run_us: i64,
}

impl Counts {
    const ZERO: Counts = Counts { n: [0; 5], wait: [0; BUCKETS], run: [0; BUCKETS], wait_us: 0, run_us: 0 };

    fn add(&mut self, o: &Counts) {
        for i in 0..5 {
            self.n[i] += o.n[i];
        }
        self.wait_us += o.wait_us;
        self.run_us += o.run_us;
        for i in 0..BUCKETS {
            self.wait[i] += o.wait[i];
            self.run[i] += o.run[i];
        }
    }
}

pub fn bucket_of(ms: f64) -> usize {
    BOUNDS_MS.iter().position(|b| ms <= *b).unwrap_or(BUCKETS - 1)
}

/// The q-quantile of a histogram, interpolated linearly inside its bucket (the unbounded
/// last bucket answers its lower bound); None when it is empty.
pub fn quantile(hist: &[i64], q: f64) -> Option<f64> {
    let total: i64 = hist.iter().sum();
    if total <= 0 {
        return None;
    }
    let rank = q * total as f64;
    let mut below = 0i64;
    for (i, &n) in hist.iter().enumerate().take(BUCKETS) {
        if n > 0 && (below + n) as f64 >= rank {
            let lo = if i == 0 { 0.0 } else { BOUNDS_MS[i - 1] };
            let hi = BOUNDS_MS[i];
            if hi.is_infinite() {
                return Some(lo);
            }
            return Some(lo + (hi - lo) * ((rank - below as f64) / n as f64).clamp(0.0, 1.0));
        }
        below += n;
    }
    Some(BOUNDS_MS[BUCKETS - 2])
}

// Shared memory: one entry per (database, queue, minute) not yet taken by a pass.
#[derive(Copy, Clone)]
struct Entry {
    db: u32, // 0: free
    minute: i64,
    len: u16,
    queue: [u8; QUEUE_MAX],
    counts: Counts,
}

impl Entry {
    const FREE: Entry = Entry { db: 0, minute: 0, len: 0, queue: [0; QUEUE_MAX], counts: Counts::ZERO };

    fn is(&self, db: u32, queue: &str, minute: i64) -> bool {
        self.db == db && self.minute == minute && &self.queue[..self.len as usize] == queue.as_bytes()
    }
}

#[derive(Copy, Clone)]
struct Entries {
    all: [Entry; ENTRIES],
}
unsafe impl PGRXSharedMemory for Entries {}

static ENTRIES_SHM: PgLwLock<Entries> = unsafe { PgLwLock::new(c"jobq_counters") };
static ENABLED: AtomicBool = AtomicBool::new(false);

/// Called from _PG_init while preloading.
pub fn init() {
    pg_shmem_init!(ENTRIES_SHM = Entries { all: [Entry::FREE; ENTRIES] });
    ENABLED.store(true, Ordering::Relaxed);
}

/// What this transaction noted (`taken`: false) or took out of shared memory (true), by the
/// subtransaction that did it.
pub struct Note {
    subxact: u32,
    taken: bool,
    db: u32,
    queue: String,
    minute: i64,
    counts: Counts,
}

thread_local! {
    /// Published (or given back) at the end of the transaction: src/xact.rs.
    pub(crate) static PENDING: Notes<Note> = const { Notes::new() };
}

fn current_subxact() -> u32 {
    unsafe { pg_sys::GetCurrentSubTransactionId() }
}

/// Adds counts to shared memory. Nothing here may fail (it runs after COMMIT).
fn publish<'a>(notes: impl Iterator<Item = &'a Note>) {
    let mut shm = ENTRIES_SHM.exclusive();
    for n in notes {
        let all = &mut shm.all;
        let i = all
            .iter()
            .position(|e| e.is(n.db, &n.queue, n.minute))
            .or_else(|| all.iter().position(|e| e.db == 0))
            .unwrap_or_else(|| {
                // Full: the oldest minute makes room.
                let (i, _) = all.iter().enumerate().min_by_key(|(_, e)| e.minute).unwrap();
                all[i] = Entry::FREE;
                i
            });
        let e = &mut all[i];
        if e.db == 0 {
            *e = Entry { db: n.db, minute: n.minute, len: n.queue.len() as u16, ..Entry::FREE };
            e.queue[..n.queue.len()].copy_from_slice(n.queue.as_bytes());
        }
        e.counts.add(&n.counts);
    }
}

/// At COMMIT or PREPARE: what was noted goes to shared memory; what was taken stays taken.
pub(crate) fn at_commit(notes: Vec<Note>) {
    publish(notes.iter().filter(|n| !n.taken));
}

/// At ABORT: what was noted is dropped; what was taken goes back.
pub(crate) fn at_abort(notes: Vec<Note>) {
    publish(notes.iter().filter(|n| n.taken));
}

/// At the end of subtransaction `sub` (child of `parent`): committed, its notes (and those its
/// committed children passed up to it) become the parent's; aborted, they are dropped and
/// what it took goes back.
pub(crate) fn at_subxact_end(committed: bool, sub: u32, parent: u32) {
    PENDING.with(|p| {
        p.update(|notes| {
            if committed {
                for n in notes.iter_mut().filter(|n| n.subxact >= sub) {
                    n.subxact = parent;
                }
            } else {
                let (ended, kept): (Vec<Note>, Vec<Note>) = std::mem::take(notes).into_iter().partition(|n| n.subxact >= sub);
                *notes = kept;
                publish(ended.iter().filter(|n| n.taken));
            }
        })
    });
}

fn note(queue: &str, minute: i64, counts: Counts, taken: bool) {
    let (db, subxact) = (crate::my_db(), current_subxact());
    PENDING.with(|p| {
        p.update(|notes| match notes.iter_mut().find(|n| !n.taken && !taken && n.subxact == subxact && n.minute == minute && n.queue == queue) {
            Some(n) => n.counts.add(&counts),
            None => notes.push(Note { subxact, taken, db, queue: queue.to_owned(), minute, counts }),
        })
    });
}

#[pg_schema]
pub mod jobq {
    use super::*;

    /// Counts `event` ('enqueued', 'started', 'completed', 'failed' or 'dead') of a job of
    /// `queue` at `at`, in this transaction; for 'started' the wait `since` the job was due,
    /// for 'completed' and 'failed' the run `since` it started, when given. Called by the
    /// functions that move jobs (they run as the extension's owner; PUBLIC may not call it).
    /// True when counted; false without the preload, or for a queue name too long to count.
    /// (A value, so that PL/pgSQL can call it as an expression: docs/internals.md, "CPU per job: what each step saved".)
    #[pg_extern(volatile, parallel_unsafe, name = "_tally")]
    pub fn tally(queue: &str, event: &str, since: Option<TimestampWithTimeZone>, at: TimestampWithTimeZone) -> bool {
        if !ENABLED.load(Ordering::Relaxed) || queue.len() > QUEUE_MAX {
            return false;
        }
        let Some(e) = EVENTS.iter().position(|x| *x == event) else {
            ereport!(ERROR, PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE, format!("jobq: unknown event {event:?}"));
        };
        let at_us: i64 = at.into();
        let mut counts = Counts::ZERO;
        counts.n[e] = 1;
        if let Some(since) = since {
            let us = (at_us - i64::from(since)).max(0);
            let ms = us as f64 / 1000.0;
            match e {
                1 => (counts.wait[bucket_of(ms)], counts.wait_us) = (1, us),
                2 | 3 => (counts.run[bucket_of(ms)], counts.run_us) = (1, us),
                _ => {}
            }
        }
        note(queue, at_us - at_us.rem_euclid(USECS_PER_MINUTE), counts, false);
        true
    }

    /// Takes this database's counts out of shared memory, for the reap pass to add to
    /// jobq.queue_minutes and jobq.queue_totals (src/sql/counters.sql). They go back if this transaction does not
    /// commit.
    #[allow(clippy::type_complexity)]
    #[pg_extern(volatile, parallel_unsafe, name = "_take_tallies")]
    pub fn take_tallies() -> TableIterator<
        'static,
        (
            name!(queue, String),
            name!(minute, TimestampWithTimeZone),
            name!(enqueued, i64),
            name!(started, i64),
            name!(completed, i64),
            name!(failed, i64),
            name!(dead, i64),
            name!(wait_ms, Vec<i64>),
            name!(run_ms, Vec<i64>),
            name!(wait_us, i64),
            name!(run_us, i64),
        ),
    > {
        let mut rows = Vec::new();
        if ENABLED.load(Ordering::Relaxed) {
            let db = crate::my_db();
            let mut taken = Vec::new();
            {
                let mut shm = ENTRIES_SHM.exclusive();
                for e in shm.all.iter_mut().filter(|e| e.db == db) {
                    let queue = String::from_utf8_lossy(&e.queue[..e.len as usize]).into_owned();
                    taken.push((queue, e.minute, e.counts));
                    *e = Entry::FREE;
                }
            }
            for (queue, minute, counts) in taken {
                note(&queue, minute, counts, true);
                let Ok(at) = TimestampWithTimeZone::try_from(minute) else { continue };
                let c = counts;
                rows.push((queue, at, c.n[0], c.n[1], c.n[2], c.n[3], c.n[4], c.wait.to_vec(), c.run.to_vec(), c.wait_us, c.run_us));
            }
        }
        TableIterator::new(rows)
    }

    /// The upper bounds of the histograms' buckets, in milliseconds (the last is Infinity).
    #[pg_extern(immutable, parallel_safe)]
    pub fn histogram_bounds() -> Vec<f64> {
        BOUNDS_MS.to_vec()
    }

    /// The q-quantile (0 to 1) of a histogram of jobq.queue_minutes (wait_ms, run_ms), in
    /// milliseconds, interpolated inside its bucket; NULL when it counts nothing.
    #[pg_extern(immutable, parallel_safe, strict)]
    pub fn histogram_quantile(hist: Vec<Option<i64>>, q: f64) -> Option<f64> {
        if !(0.0..=1.0).contains(&q) {
            ereport!(ERROR, PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE, format!("jobq: q must be between 0 and 1, got {q}"));
        }
        let h: Vec<i64> = hist.iter().map(|x| x.unwrap_or(0)).collect();
        quantile(&h, q)
    }

    /// Adds two histograms bucket by bucket (the step of the aggregate jobq.histogram_sum).
    #[pg_extern(immutable, parallel_safe, strict, name = "_histogram_add")]
    pub fn histogram_add(a: Vec<Option<i64>>, b: Vec<Option<i64>>) -> Vec<i64> {
        (0..a.len().max(b.len()))
            .map(|i| a.get(i).copied().flatten().unwrap_or(0) + b.get(i).copied().flatten().unwrap_or(0))
            .collect()
    }
}

#[cfg(test)]
mod unit {
    use super::*;

    #[test]
    fn durations_fall_in_the_first_bucket_whose_bound_they_do_not_exceed() {
        assert_eq!(bucket_of(0.0), 0);
        assert_eq!(bucket_of(1.0), 0);
        assert_eq!(bucket_of(1.5), 1);
        assert_eq!(bucket_of(300.0), 8);
        assert_eq!(bucket_of(86_400_001.0), BUCKETS - 1);
    }

    #[test]
    fn quantiles_interpolate_inside_their_bucket() {
        let mut h = [0i64; BUCKETS];
        assert_eq!(quantile(&h, 0.5), None);
        h[bucket_of(300.0)] = 1; // (200, 500]
        assert_eq!(quantile(&h, 0.5), Some(350.0));
        assert_eq!(quantile(&h, 1.0), Some(500.0));
        assert_eq!(quantile(&h, 0.0), Some(200.0));
        // 90 fast (<= 1 ms), 10 slow (1-2 s): the median is fast, p95 is slow.
        let mut h = [0i64; BUCKETS];
        h[0] = 90;
        h[bucket_of(1500.0)] = 10;
        assert!(quantile(&h, 0.5).unwrap() <= 1.0);
        assert_eq!(quantile(&h, 0.95), Some(1500.0));
        // The unbounded bucket answers its lower bound: a day.
        let mut h = [0i64; BUCKETS];
        h[BUCKETS - 1] = 3;
        assert_eq!(quantile(&h, 0.99), Some(86_400_000.0));
    }
}
