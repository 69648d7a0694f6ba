//! Claim floors: where a checkout starts walking the waiting set.
//!
//! Every claim deletes a row of `jobq.ready`, and the dead row's index entries stay at the
//! front of the claim order (priority, run_at, id) until vacuum removes them; vacuum cannot
//! while any snapshot older than the claim lives (a report, a pg_dump, a forgotten BEGIN). A
//! checkout that starts at the front walks them all: measured, 15,600 dead entries cost a
//! checkout 0.5 ms in a clean database, and many times that under a held snapshot, where each
//! one is a heap visit. A floor is a lower bound of the claim keys of the live ready rows of
//! one queue (or of all queues): checkout starts its index scan at the floor, so it walks only
//! the dead entries of claims since the floor last moved.
//!
//! The rule that keeps it safe: a floor never rises above the key of a row a checkout could
//! still claim.
//! - Lowered by every transaction that makes a row ready or moves it to a lower key
//!   (`jobq._enter_ready`, `replace`): `jobq._lower_floor` notes the key, and at COMMIT, after
//!   the rows became visible and before the client learns of the commit, the floor becomes
//!   min(floor, key). A floor is created at the lowest key. Until then the transaction's own
//!   checkouts, which already see those rows, start at min(floor, its noted keys) (`floor`).
//! - Raised only by the background worker (`raise`), in three steps: (1) it sets each floor's
//!   `recent` to the highest key and remembers the floor; (2) in a snapshot taken after that,
//!   it finds the smallest key M of the rows at or above the remembered floor; (3) it raises
//!   the floor to min(M, recent). Every commit also lowers `recent` to its keys. A row whose
//!   commit lowered things before step 1 was visible before step 1, so step 2 sees it; one
//!   whose commit came after step 1 is in `recent`. Rows being claimed (deleted, not committed)
//!   count as live in step 2, so a claim that rolls back leaves its row above the floor.
//!   (A version check instead of `recent` is not enough: a commit at or above the floor does
//!   not lower it, yet a step 2 snapshot taken before that commit does not see the row.
//!   `tests/floors.rs` caught exactly that.)
//! - Floors live in shared memory, so they need the preload; without it every checkout starts at
//!   the front, as before. They are per database, per `jobq.ready` table (a re-created extension
//!   starts afresh) and per queue name of at most NAME_MAX bytes (longer names share the floor of
//!   all queues). PREPARE TRANSACTION of a transaction that made a job ready is refused: its rows
//!   become visible at COMMIT PREPARED, in another session, after the lowering could be done.
use pgrx::bgworkers::BackgroundWorker;
use pgrx::prelude::*;
use crate::xact::Notes;
use pgrx::{pg_shmem_init, PGRXSharedMemory, PgLwLock};
use std::sync::atomic::{AtomicBool, Ordering};

const SLOTS: usize = 1024;
const NAME_MAX: usize = 63;
const PROBES: usize = 16;

/// A claim key: (priority, run_at in microseconds, id); ordered as checkout claims.
pub type Key = (i32, i64, i64);
const LOWEST: Key = (i32::MIN, i64::MIN, i64::MIN);
/// The floor of a queue with no ready row: every new row lowers it.
const HIGHEST: Key = (i32::MAX, i64::MAX, i64::MAX);

#[derive(Copy, Clone)]
struct Floor {
    used: bool,
    all: bool, // the floor of every queue of the database (checkouts of several or any queue)
    db: u32,
    rel: u32, // jobq.ready's oid
    len: u8,
    name: [u8; NAME_MAX],
    key: Key,
    recent: Key, // the lowest key committed since the raise began (HIGHEST otherwise)
}

impl Floor {
    const FREE: Floor = Floor { used: false, all: false, db: 0, rel: 0, len: 0, name: [0; NAME_MAX], key: LOWEST, recent: LOWEST };

    fn is(&self, id: &Id) -> bool {
        self.used && self.db == id.db && self.rel == id.rel && self.all == id.queue.is_none()
            && id.queue.as_deref().is_none_or(|q| &self.name[..self.len as usize] == q.as_bytes())
    }
}

#[derive(Copy, Clone)]
struct Floors {
    slots: [Floor; SLOTS],
}
unsafe impl PGRXSharedMemory for Floors {}

static FLOORS: PgLwLock<Floors> = unsafe { PgLwLock::new(c"jobq_floors") };
static ENABLED: AtomicBool = AtomicBool::new(false);

/// Called from _PG_init while preloading.
pub fn init() {
    pg_shmem_init!(FLOORS = Floors { slots: [Floor::FREE; SLOTS] });
    ENABLED.store(true, Ordering::Relaxed);
}

fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// Which floor: a queue's (None: all queues) of one jobq.ready table of one database.
#[derive(Clone, PartialEq)]
pub(crate) struct Id {
    db: u32,
    rel: u32,
    queue: Option<String>,
}

impl Id {
    fn new(rel: pg_sys::Oid, queue: Option<&str>) -> Option<Id> {
        let queue = match queue {
            Some(q) if q.len() > NAME_MAX => return None,
            q => q.map(str::to_owned),
        };
        Some(Id { db: crate::my_db(), rel: rel.to_u32(), queue })
    }

    fn home(&self) -> usize {
        // FNV-1a over the identity.
        let mut h: u64 = 0xcbf29ce484222325;
        let mut eat = |b: u8| h = (h ^ b as u64).wrapping_mul(0x100000001b3);
        self.db.to_le_bytes().into_iter().chain(self.rel.to_le_bytes()).for_each(&mut eat);
        match &self.queue {
            Some(q) => q.bytes().for_each(&mut eat),
            None => eat(0xff),
        }
        h as usize % SLOTS
    }
}

fn find(floors: &Floors, id: &Id) -> Option<usize> {
    (0..PROBES).map(|i| (id.home() + i) % SLOTS).find(|&s| floors.slots[s].is(id))
}

/// The floor checkout starts at: the lowest key when there is none (no preload, a new queue),
/// and never above a key this transaction made ready: those rows are visible to its own
/// checkouts before its commit lowers the shared floor.
pub fn floor(rel: pg_sys::Oid, queue: Option<&str>) -> Key {
    if !enabled() {
        return LOWEST;
    }
    let Some(id) = Id::new(rel, queue) else { return LOWEST };
    let shared = {
        let floors = FLOORS.share();
        find(&floors, &id).map_or(LOWEST, |s| floors.slots[s].key)
    };
    let own = PENDING.with(|p| p.read(|p| p.iter().filter(|(i, _)| *i == id).map(|(_, k)| *k).min()));
    own.map_or(shared, |k| shared.min(k))
}

thread_local! {
    /// Keys this transaction made ready, per floor, lowered into the floors at commit
    /// (src/xact.rs).
    pub(crate) static PENDING: Notes<(Id, Key)> = const { Notes::new() };
}

pub fn lower(rel: pg_sys::Oid, queue: &str, key: Key) {
    if !enabled() {
        return;
    }
    crate::fairness::made_ready_here();
    PENDING.with(|p| {
        p.update(|p| {
            for id in [Id::new(rel, Some(queue)), Id::new(rel, None)].into_iter().flatten() {
                match p.iter_mut().find(|(i, _)| *i == id) {
                    Some((_, k)) => *k = (*k).min(key),
                    None => p.push((id, key)),
                }
            }
        })
    });
}

/// At commit: each floor (and its `recent`) becomes min(floor, key); a missing floor is
/// created at the lowest key. Nothing here may fail (the transaction has committed); a full
/// table just creates nothing.
pub(crate) fn apply_lowering(pending: &[(Id, Key)]) {
    // Most commits change nothing: look under the shared lock first.
    let needed = {
        let floors = FLOORS.share();
        pending.iter().any(|(id, key)| {
            find(&floors, id).is_none_or(|s| *key < floors.slots[s].key || *key < floors.slots[s].recent)
        })
    };
    if !needed {
        return;
    }
    let mut floors = FLOORS.exclusive();
    for (id, key) in pending {
        match find(&floors, id) {
            Some(s) => {
                let f = &mut floors.slots[s];
                f.key = f.key.min(*key);
                f.recent = f.recent.min(*key);
            }
            None => {
                let home = id.home();
                if let Some(s) = (0..PROBES).map(|i| (home + i) % SLOTS).find(|&s| !floors.slots[s].used) {
                    let mut f = Floor { used: true, all: id.queue.is_none(), db: id.db, rel: id.rel, ..Floor::FREE };
                    if let Some(q) = &id.queue {
                        f.len = q.len() as u8;
                        f.name[..q.len()].copy_from_slice(q.as_bytes());
                    }
                    floors.slots[s] = f;
                }
            }
        }
    }
}

/// The background worker's pass for its database (the only one that raises its floors):
/// raise each floor to the smallest key of the rows at or above it, HIGHEST when there is
/// none. Runs outside any transaction: step 2's lookups run in a transaction started after
/// step 1 (module comment).
pub fn raise() {
    if !enabled() {
        return;
    }
    let db = crate::my_db();
    // Step 1.
    let seen: Vec<(usize, Id, Key)> = {
        let mut floors = FLOORS.exclusive();
        let mine: Vec<usize> = (0..SLOTS).filter(|&s| floors.slots[s].used && floors.slots[s].db == db).collect();
        mine.into_iter()
            .map(|s| {
                let f = &mut floors.slots[s];
                f.recent = HIGHEST;
                let queue = (!f.all).then(|| String::from_utf8_lossy(&f.name[..f.len as usize]).into_owned());
                (s, Id { db, rel: f.rel, queue }, f.key)
            })
            .collect()
    };
    if seen.is_empty() {
        return;
    }
    // Step 2.
    let found: Vec<Option<Key>> = BackgroundWorker::transaction(|| {
        // None: the extension was dropped (held against a drop until this transaction ends).
        let rel: Option<pg_sys::Oid> = if crate::bgworker::hold_extension() {
            Spi::get_one("SELECT to_regclass('jobq.ready')::oid").ok().flatten()
        } else {
            None
        };
        // The lookups below read jobq.ready in a snapshot taken once it is locked: one taken
        // before would see the table empty after a compaction (src/compact.rs) that committed
        // in between, and raise every floor to HIGHEST.
        if let Some(r) = rel {
            unsafe {
                pg_sys::LockRelationOid(r, pg_sys::AccessShareLock as pg_sys::LOCKMODE);
                pg_sys::PushActiveSnapshot(pg_sys::GetTransactionSnapshot());
            }
        }
        let found = seen
            .iter()
            .map(|(_, id, key)| {
                if rel.map(|r| r.to_u32()) != Some(id.rel) {
                    return None; // the extension was dropped or re-created: forget this floor
                }
                // A failed lookup leaves the floor where it is.
                Some(lowest_row(id.queue.as_deref(), *key).map_or(*key, |m| m.unwrap_or(HIGHEST)))
            })
            .collect();
        if rel.is_some() {
            unsafe { pg_sys::PopActiveSnapshot() };
        }
        found
    });
    // Step 3. Only this pass frees slots, so a slot it read still holds the same floor.
    let mut floors = FLOORS.exclusive();
    for ((s, _, _), m) in seen.iter().zip(found) {
        let f = &mut floors.slots[*s];
        match m {
            None => *f = Floor::FREE,
            Some(m) => f.key = f.key.max(m.min(f.recent)),
        }
    }
}

/// The smallest claim key among the rows of jobq.ready (of `queue`, or of every queue) at or
/// above `from`, seen by the current snapshot (None: there is none); Err when the lookup failed.
fn lowest_row(queue: Option<&str>, from: Key) -> Result<Option<Key>, ()> {
    let run_at = TimestampWithTimeZone::try_from(from.1).map_err(|_| ())?;
    Spi::connect(|c| {
        let t = c.select(
            "SELECT r.priority, r.run_at, r.id FROM jobq.ready r
              WHERE ($1::text IS NULL OR (r.queue_hash = hashtext($1) AND r.queue = $1))
                AND r.fairness_key IS NULL  -- the plain walks' rows (ready_by_queue, ready_any)
                AND (r.priority, r.run_at, r.id) >= ($2, $3, $4)
              ORDER BY r.priority, r.run_at, r.id LIMIT 1",
            None,
            &[queue.into(), from.0.into(), run_at.into(), from.2.into()],
        )?;
        if t.is_empty() {
            return Ok::<_, pgrx::spi::Error>(None);
        }
        let r = t.first();
        Ok(match (r.get::<i32>(1)?, r.get::<TimestampWithTimeZone>(2)?, r.get::<i64>(3)?) {
            (Some(p), Some(at), Some(id)) => Some((p, pg_sys::TimestampTz::from(at), id)),
            _ => None,
        })
    })
    .map_err(|_| ())
}

#[pg_schema]
mod jobq {
    use pgrx::prelude::*;

    /// The floor checkout of `queue` (NULL: several or all queues) starts at.
    #[pg_extern(stable, parallel_safe, name = "_floor")]
    pub fn floor(
        ready: pg_sys::Oid,
        queue: Option<&str>,
    ) -> TableIterator<'static, (name!(priority, i32), name!(run_at, TimestampWithTimeZone), name!(id, i64))> {
        let (p, at, id) = super::floor(ready, queue);
        let at = TimestampWithTimeZone::try_from(at).unwrap_or_else(|_| TimestampWithTimeZone::try_from(i64::MIN).unwrap());
        TableIterator::once((p, at, id))
    }

    /// Notes that this transaction made a row of `queue` ready at this key: at commit, the
    /// floors of the queue and of all queues come down to it.
    #[pg_extern(volatile, parallel_unsafe, name = "_lower_floor")]
    pub fn lower_floor(ready: pg_sys::Oid, queue: &str, priority: i32, run_at: TimestampWithTimeZone, id: i64) {
        super::lower(ready, queue, (priority, pg_sys::TimestampTz::from(run_at), id));
    }
}
