//! What a dashboard shows of the background worker: the last reap pass of each served
//! database (when it ended, how long it took, what it did, the error if it failed). The
//! reaper's pass (`jobq._reap_pass`, src/sql/reap.sql) notes it here, in shared memory (no
//! table write each second, no WAL); `jobq._last_pass()` reads it for the view `jobq.health`
//! (src/sql/observe.sql). Kept since the server started; without the preload there is none.
use pgrx::prelude::*;
use pgrx::{pg_shmem_init, PGRXSharedMemory, PgLwLock};
use std::sync::atomic::{AtomicBool, Ordering};

const DATABASES: usize = 1024;
const ERROR_MAX: usize = 200;

#[derive(Copy, Clone)]
struct Pass {
    db: u32,                 // 0: free
    ended: i64,              // TimestampTz
    took_us: i64,
    counts: [i32; 5],        // as jobq_reap() returns them
    error_len: u8,           // 0: the pass succeeded
    error: [u8; ERROR_MAX],
}

impl Pass {
    const FREE: Pass = Pass { db: 0, ended: 0, took_us: 0, counts: [0; 5], error_len: 0, error: [0; ERROR_MAX] };
}

#[derive(Copy, Clone)]
struct Passes {
    last: [Pass; DATABASES],
}
unsafe impl PGRXSharedMemory for Passes {}

static PASSES: PgLwLock<Passes> = unsafe { PgLwLock::new(c"jobq_passes") };
static ENABLED: AtomicBool = AtomicBool::new(false);

/// Called from _PG_init while preloading.
pub fn init() {
    pg_shmem_init!(PASSES = Passes { last: [Pass::FREE; DATABASES] });
    ENABLED.store(true, Ordering::Relaxed);
}

#[pg_schema]
pub mod jobq {
    use super::*;

    /// Notes this database's pass that just ended (called by `jobq._reap_pass`). A full table
    /// (more than 1,024 databases) keeps no note for the rest.
    #[pg_extern(volatile, name = "_note_pass")]
    pub fn note_pass(ended: TimestampWithTimeZone, took_us: i64, counts: Vec<i32>, error: Option<&str>) {
        if !ENABLED.load(Ordering::Relaxed) {
            return;
        }
        let db = crate::my_db();
        let mut p = Pass { db, ended: ended.into(), took_us, ..Pass::FREE };
        for (i, c) in counts.iter().take(5).enumerate() {
            p.counts[i] = *c;
        }
        if let Some(e) = error {
            // At most ERROR_MAX bytes, cut at a character boundary.
            let mut n = e.len().min(ERROR_MAX);
            while !e.is_char_boundary(n) {
                n -= 1;
            }
            p.error[..n].copy_from_slice(&e.as_bytes()[..n]);
            p.error_len = n.max(1) as u8;
        }
        let mut all = PASSES.exclusive();
        let slot = all.last.iter().position(|x| x.db == db).or_else(|| all.last.iter().position(|x| x.db == 0));
        if let Some(i) = slot {
            all.last[i] = p;
        }
    }

    /// The last pass of this database's background worker, if one ran since the server started.
    #[allow(clippy::type_complexity)]
    #[pg_extern(stable, name = "_last_pass")]
    pub fn last_pass() -> TableIterator<
        'static,
        (
            name!(ended_at, TimestampWithTimeZone),
            name!(took_ms, f64),
            name!(workers_reaped, i32),
            name!(jobs_requeued, i32),
            name!(jobs_dead, i32),
            name!(locks_released, i32),
            name!(jobs_pruned, i32),
            name!(error, Option<String>),
        ),
    > {
        let db = crate::my_db();
        let found = if ENABLED.load(Ordering::Relaxed) { PASSES.share().last.iter().find(|x| x.db == db).copied() } else { None };
        TableIterator::new(found.into_iter().filter_map(|p| {
            let ended = TimestampWithTimeZone::try_from(p.ended).ok()?;
            let error = (p.error_len > 0).then(|| String::from_utf8_lossy(&p.error[..p.error_len as usize]).into_owned());
            let c = p.counts;
            Some((ended, p.took_us as f64 / 1000.0, c[0], c[1], c[2], c[3], c[4], error))
        }))
    }
}
