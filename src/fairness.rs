//! Fair checkout in the fast path of checkout (src/checkout.rs): a checkout of one queue that
//! takes turns (rows of `jobq.fairness`, src/sql/fairness.sql) claimed in its turns ([`Turns`],
//! [`claim`]), the floors its walks of the turns start at, and whether any queue of this
//! database takes turns (a checkout of several queues or of every queue goes to the SQL while
//! one does). A database that never wrote a turn skips the table (src/written.rs). And the
//! enqueue's look for a fairness key's turns ([`has_turns`], src/enqueue.rs).
use crate::checkout::{lock, Claimer, Layout, Took};
use crate::xact::Notes;
use pgrx::{pg_shmem_init, PGRXSharedMemory, PgAtomic, PgLwLock};
use std::cell::RefCell;
use std::collections::HashMap;
use std::hash::Hash;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use crate::rows::{attr, column, sql_fn, text, text_datum, tupdesc_attr, IndexEntries};
use crate::written::{look, note, Table};
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::ffi::CStr;
use std::ptr::null_mut;

/// Whether fairness key `key` of queue `queue` (text datums), and the queue's jobs without a
/// key, have their rows of `jobq.fairness` at `priority` (looked up by their copies in
/// `jobq.fairness_keys`): what `jobq._fair_keys` looks for under READ COMMITTED before it
/// inserts anything (src/sql/fairness.sql), under the same shared advisory lock on the queue
/// (taken here and held to the end of the transaction) and with a snapshot taken after it.
/// False when a row is missing, or when the table or its index is not the expected one: then
/// `jobq._fair_keys` looks again and inserts what is missing. The look is one descent of
/// fairness_by_key per row (a call of `jobq._fair_keys` cost an enqueue of a known key 54 us
/// against 8 for the enqueue itself).
pub unsafe fn has_turns(nsp: pg_sys::Oid, queue: pg_sys::Datum, priority: i32, key: pg_sys::Datum) -> bool {
    with_by_key(nsp, |rel, ix| {
        // pg_advisory_xact_lock_shared(1785684593, hashtext('fairness:' || queue)), as the SQL.
        let hash = crate::rows::hashtext(text_datum(&[b"fairness:".as_slice(), text(queue)].concat()));
        pg_sys::DirectFunctionCall2Coll(Some(sql_fn::pg_advisory_xact_lock_shared_int4), pg_sys::InvalidOid, pg_sys::Datum::from(crate::slots::CLASS), hash);
        let snapshot = pg_sys::RegisterSnapshot(pg_sys::GetLatestSnapshot());
        let found = [Some(key), None].into_iter().all(|k| by_key_finds(rel, ix, snapshot, queue, Some((k, priority))));
        pg_sys::UnregisterSnapshot(snapshot);
        found
    })
    .unwrap_or(false)
}

/// Whether queue `queue` (a text datum) has a row of `jobq.fairness` in `snapshot`: one descent
/// of fairness_by_key among the rows' copies (`jobq.fairness_keys`). None when the table or
/// its index is not what is named here.
unsafe fn has_keys(nsp: pg_sys::Oid, queue: pg_sys::Datum, snapshot: pg_sys::Snapshot) -> Option<bool> {
    with_by_key(nsp, |rel, ix| by_key_finds(rel, ix, snapshot, queue, None))
}

/// Calls `look` with `jobq.fairness_keys` and its index fairness_by_key, opened, when both are
/// there and the index is what is named here ([`by_key_fits`]); None otherwise. Both are
/// closed after, their locks kept to the end of the transaction.
unsafe fn with_by_key<T>(nsp: pg_sys::Oid, look: impl FnOnce(pg_sys::Relation, pg_sys::Relation) -> T) -> Option<T> {
    let relid = |name: &'static CStr| crate::relids::relation(nsp, name);
    let (rel_id, ix_id) = (relid(c"fairness_keys"), relid(c"fairness_by_key"));
    if rel_id == pg_sys::InvalidOid || ix_id == pg_sys::InvalidOid {
        return None;
    }
    let share = pg_sys::AccessShareLock as i32;
    let rel = pg_sys::table_open(rel_id, share);
    let ix = pg_sys::index_open(ix_id, share);
    let found = by_key_fits(rel, ix).then(|| look(rel, ix));
    pg_sys::index_close(ix, pg_sys::NoLock as i32);
    pg_sys::table_close(rel, pg_sys::NoLock as i32);
    found
}

/// Whether fairness_by_key (`ix`, of `rel`) finds a row of queue `queue` in `snapshot`; with
/// `at`, of that key (None: the queue's jobs without one, `IS NULL`) at that priority.
unsafe fn by_key_finds(
    rel: pg_sys::Relation,
    ix: pg_sys::Relation,
    snapshot: pg_sys::Snapshot,
    queue: pg_sys::Datum,
    at: Option<(Option<pg_sys::Datum>, i32)>,
) -> bool {
    let coll = |column: usize| *(*ix).rd_indcollation.add(column); // each text key's own, as each_due's
    let oid = pg_sys::Oid::from;
    let eq = pg_sys::BTEqualStrategyNumber as u16;
    let mut keys: [pg_sys::ScanKeyData; 3] = std::mem::zeroed();
    pg_sys::ScanKeyEntryInitialize(&mut keys[0], 0, 1, eq, pg_sys::InvalidOid, coll(0), oid(pg_sys::F_TEXTEQ), queue);
    let n = match at {
        None => 1,
        Some((key, priority)) => {
            match key {
                Some(k) => pg_sys::ScanKeyEntryInitialize(&mut keys[1], 0, 2, eq, pg_sys::InvalidOid, coll(1), oid(pg_sys::F_TEXTEQ), k),
                None => pg_sys::ScanKeyEntryInitialize(
                    &mut keys[1],
                    (pg_sys::SK_ISNULL | pg_sys::SK_SEARCHNULL) as i32,
                    2,
                    0, // InvalidStrategy: IS NULL
                    pg_sys::InvalidOid,
                    pg_sys::InvalidOid,
                    pg_sys::InvalidOid,
                    pg_sys::Datum::from(0usize),
                ),
            }
            pg_sys::ScanKeyEntryInitialize(&mut keys[2], 0, 3, eq, pg_sys::INT4OID, pg_sys::InvalidOid, oid(pg_sys::F_INT4EQ), pg_sys::Datum::from(priority));
            3
        }
    };
    let mut any = false;
    scan(rel, ix, snapshot, &mut keys[..n], |_| {
        any = true;
        false
    });
    any
}

/// Whether `ix` is fairness_by_key as named here: `rel`'s (queue, fairness_key, priority), whole.
unsafe fn by_key_fits(rel: pg_sys::Relation, ix: pg_sys::Relation) -> bool {
    let want = [("queue", pg_sys::TEXTOID), ("fairness_key", pg_sys::TEXTOID), ("priority", pg_sys::INT4OID)]
        .map(|(name, typ)| column_of((*rel).rd_att, name, typ).map(|i| (i + 1) as i16));
    want.iter().all(Option::is_some) && keys_are(ix, &want.map(Option::unwrap)) && (*ix).rd_indpred.is_null()
}

/// Column `name` of `desc`, 0-based, when it is of type `typ`.
unsafe fn column_of(desc: pg_sys::TupleDesc, name: &str, typ: pg_sys::Oid) -> Option<usize> {
    column(desc, name).filter(|&i| (*tupdesc_attr(desc, i)).atttypid == typ)
}

/// Whether index `ix`'s keys are the columns `want` (1-based), no expression among them.
unsafe fn keys_are(ix: pg_sys::Relation, want: &[i16]) -> bool {
    let i = (*ix).rd_index;
    (*i).indnkeyatts as usize == want.len() && (*i).indkey.values.as_slice(want.len()) == want && (*ix).rd_indexprs.is_null()
}

/// Whether `jobq.fairness` has a row in `snapshot`, read from its copies in
/// `jobq.fairness_keys`, which no claim updates (`snapshot` None: whether it may have one, from
/// their size alone, without reading them).
pub unsafe fn any(nsp: pg_sys::Oid, snapshot: Option<pg_sys::Snapshot>) -> bool {
    look(
        Table::Fairness,
        || {
            let table = crate::relids::relation(nsp, c"fairness_keys");
            // None: an older release's SQL under this library.
            (table != pg_sys::InvalidOid).then(|| (pg_sys::table_open(table, pg_sys::AccessShareLock as i32), ()))
        },
        |rel, ()| {
            let Some(snapshot) = snapshot else { return true };
            let scan = pg_sys::systable_beginscan(rel, pg_sys::InvalidOid, false, snapshot, 0, null_mut());
            let row = !pg_sys::systable_getnext(scan).is_null();
            pg_sys::systable_endscan(scan);
            row
        },
    )
}

#[pg_schema]
pub mod jobq {
    use super::*;

    /// Notes that this database's jobq.fairness has rows (called by the trigger
    /// `fairness_written`, src/sql/fairness.sql, after each statement that inserts some, before
    /// they commit), the lowest `served` of the statement's rows that take turns (`low`; NULL:
    /// none, only rows that keep a weight).
    #[pg_extern(volatile, name = "_note_fairness")]
    pub fn note_fairness(low: Option<i64>) {
        note(crate::my_db(), Table::Fairness, true);
        // The walks' floors (below) must not pass the new rows: now for this transaction's own
        // walks, and again at its commit (src/xact.rs) for everyone's.
        let low = low.unwrap_or(i64::MAX);
        ADDED.with(|a| {
            a.update(|v| match v.first_mut() {
                Some(m) => *m = (*m).min(low),
                None => v.push(low),
            })
        });
        added(low);
    }
}

/// Where a walk of a queue's turns starts (`Turns::each_turn`). Every claim moves its key's row
/// to the back (a new `served`), and the old version's index entry stays at the front of
/// fairness_by_turn until vacuum: measured, a walk from the front at 3,000 claims a second
/// passed 160 index pages of them. So each backend remembers, per queue and priority, the
/// `served` of the first row its last walk saw, and starts there.
///
/// The rule that keeps it safe: a row's `served` only grows (a claim moves it to the back with
/// a new value, and a row a claim moves is seen at its old value until that claim commits), so
/// no row that a walk could meet sorts before the first one a walk saw, except a row inserted
/// since (a new key's, `jobq._fair_keys`), whose `served` was drawn when it was inserted. Every
/// such insert counts one in shared memory at the insert and again at its commit, with the
/// lowest `served` it inserted ([`ADDS`]); a floor is kept with the count read before the
/// snapshot of the walk that found it, and is forgotten when an insert counted since may sort
/// before it: one whose lowest `served` is below the floor's, or one no longer in [`ADDS`]. A
/// new key's row is inserted at the back, so the floors outlive the enqueues of new keys (20 a
/// second in bench/fairness.sh; forgotten at each, the walks from the front read 27 to 39
/// buffers of fairness_by_turn a job, against 5). Without the preload there is no count, and
/// every walk starts at the front. (A key with no due job keeps its place, and the floors with
/// it, until its jobs come due or the pass drops the row of a key with none waiting.)
static TURNS_ADDED: PgAtomic<AtomicU64> = unsafe { PgAtomic::new(c"jobq_turns_added") };
/// The last 64 inserts of turns ([`Lows`]): the lowest `served` each inserted (i64::MAX: none
/// that take turns).
static ADDS: PgLwLock<Lows<i64, 64>> = unsafe { PgLwLock::new(c"jobq_turns_adds") };
/// Whether a key has a due job is one descent of ready_fair (ready_by_queue for the jobs
/// without a key). Measured at 16 clients, a walk made about nine of them a claim for keys
/// with none: the queue's key of the jobs without one, and keys whose last job was taken, whose
/// rows keep their place until the pass drops them. So each backend remembers which keys had
/// none ([`IDLE`]), until when (the run_at of their first job not yet due), and under which
/// count of jobs made ready. That count is this one: every transaction that made a row ready,
/// in any database of the cluster, counts one at its commit (src/xact.rs), once the row is
/// seen by every snapshot taken after, and its own backend forgets what it remembered at the
/// note of the row's key for the floors of checkout (src/floors.rs, `lower`; its own walks see
/// the row at once). A key with a due job that a pause holds
/// back is not remembered (a resume makes no row ready). The queue's top due priority
/// (`Turns::top`, two descents a claim) is remembered under the same count ([`TOP`]) where no
/// job of the queue waits at a higher priority than the top's, due or not. What a backend
/// remembers may come from its own transaction's claims and moves, which no count undoes: it
/// is forgotten at any abort ([`forget`]).
static READY_ADDED: PgAtomic<AtomicU64> = unsafe { PgAtomic::new(c"jobq_ready_added") };
/// The last 256 commits counted in [`READY_ADDED`] ([`Lows`]): the lowest claim key (priority,
/// run_at, id) of the rows each made ready, in any queue of any database. [`START`] outlives
/// the commits whose rows all sort after it: an enqueue's job, due now, sorts after every job
/// of a backlog.
static READIES: PgLwLock<Lows<crate::floors::Key, 256>> = unsafe { PgLwLock::new(c"jobq_readies") };
/// The last `N` events of a count in shared memory, each with its count (after it) and the
/// lowest key it added, at that count modulo `N`: written with the count under the lock
/// ([`count_low`]), so that a reader of a count sees its entry.
#[derive(Clone, Copy)]
pub struct Lows<T, const N: usize> {
    at: [(u64, T); N],
}
unsafe impl<T, const N: usize> PGRXSharedMemory for Lows<T, N> {}
/// The `served` the last fair claim on this server left its key's row at, moved or not: a key
/// served alone keeps it from claim to claim, and only a key that has it may be at the back of
/// its turns, which [`Turns::served`] then confirms from the sequence (keys that take turns
/// change it at every claim, and are moved without that read).
static LAST_SERVED: PgAtomic<AtomicI64> = unsafe { PgAtomic::new(c"jobq_last_served") };
static ENABLED: AtomicBool = AtomicBool::new(false);

/// Called from _PG_init while preloading.
pub fn init() {
    pg_shmem_init!(TURNS_ADDED);
    pg_shmem_init!(ADDS = Lows { at: [(0, i64::MIN); 64] });
    pg_shmem_init!(READY_ADDED);
    pg_shmem_init!(READIES = Lows { at: [(0, (i32::MIN, i64::MIN, i64::MIN)); 256] });
    pg_shmem_init!(LAST_SERVED);
    ENABLED.store(true, Ordering::Relaxed);
}

thread_local! {
    /// Whether this transaction inserted a row of jobq.fairness (counted again at its commit):
    /// the lowest `served` it inserted.
    pub static ADDED: Notes<i64> = const { Notes::new() };
    /// This backend's floors.
    static FLOORS: RefCell<Vec<Floor>> = const { RefCell::new(Vec::new()) };
    /// The keys this backend found with no due job ([`READY_ADDED`]), under one count of jobs
    /// made ready: (jobq.fairness's oid, queue, priority, key) -> the first run_at still to
    /// come (i64::MAX: none).
    static IDLE: RefCell<Memo<IdleId, i64>> = RefCell::new(Memo::new(4096));
    /// The top due priority this backend found (None: no due job), under one count of jobs
    /// made ready: (jobq.fairness's oid, queue, the lowest priority looked at) -> it.
    static TOP: RefCell<Memo<TopId, Option<i32>>> = RefCell::new(Memo::new(1024));
    /// Where the scans of a key's ready rows start ([`READY_ADDED`]): (jobq.fairness's oid,
    /// queue, priority, key) -> the (run_at, id) of the first row this backend's last scan of
    /// the key returned, and the count of jobs made ready it holds under. Every entry of the
    /// key's index before that row was one that scan's snapshot did not see: the claims'
    /// deleted rows (a key's jobs are taken from the front, and the index keeps their entries
    /// until vacuum), which no later snapshot sees either, or rows not yet committed, whose
    /// commit moves the count. It holds under a later count while every commit counted since
    /// made rows ready at or after it only ([`READIES`]). Measured in bench/fairness.sh, where
    /// the small tenants run out of jobs after some 20 s and every checkout takes the large
    /// tenant's jobs: each look at its key read from the front of its range, past the entries
    /// of every job taken since the run began, and again at every new tenant's job (20 a
    /// second) while the start was forgotten at every count.
    static START: RefCell<HashMap<IdleId, (i64, i64, u64)>> = RefCell::new(HashMap::new());
}

/// A floor of the turns of (jobq.fairness's oid, queue, priority).
struct Floor {
    id: TopId,
    /// The count of inserts of turns it was found under.
    added: u64,
    /// The `served` a walk starts at.
    start: i64,
    /// The keys whose rows are below `start`, passed for having no due job (at most [`STUCK`]).
    stuck: Vec<Key>,
    /// How far past `start` the walk that found it went (the `served` of the last row it saw,
    /// less `start`): the width of the next walk's first window ([`window`]).
    reach: i64,
    /// The rows at or after `start` that the walk found with no due job, by `served` (a row's
    /// `served` is its own: drawn from a sequence, kept by a move only within its key's turn).
    /// The next walk passes their index entries without reading the rows while this backend
    /// still remembers their keys as idle ([`IDLE`]): measured at 16 clients in
    /// bench/fairness.sh, half the rows a walk read (6.6 of 13.4 a claim) were such keys,
    /// whose rows keep their place at the front until the pass drops them.
    idle: Vec<(i64, Key)>,
}

impl Floor {
    /// Whether this floor still holds under count `n` of inserts of turns: found under it, or
    /// every insert counted since sorts at or after it (then it is kept under `n`, and not
    /// looked at again until the count moves).
    fn current(&mut self, n: u64) -> bool {
        if self.added != n {
            if !lows_after(&ADDS, self.added, n, self.start) {
                return false;
            }
            self.added = n;
        }
        true
    }
}

/// What a walk of the turns finds of the next [`Floor`]: the first row it did not pass for
/// having no due job (`start`), the keys it passed so before that row (`stuck`, the last
/// floor's first), the rows it passed so after it whose keys this backend remembers so
/// (`idle`), and the last row it saw.
struct NextFloor {
    start: Option<i64>,
    stuck: Vec<Key>,
    idle: Vec<(i64, Key)>,
    last: Option<i64>,
}

impl NextFloor {
    /// The walk passed, or took from, the row at `at` of `key`: `idle` where it passed it for
    /// having no due job, `remembered` whether this backend remembers the key so ([`IDLE`]).
    fn saw(&mut self, key: &Key, at: i64, idle: bool, remembered: impl FnOnce() -> bool) {
        self.last = Some(at);
        if self.start.is_none() && idle && self.stuck.len() < STUCK && !self.stuck.contains(key) {
            self.stuck.push(key.clone());
        } else {
            self.start.get_or_insert(at);
            if idle && self.idle.len() < IDLE_KEPT && remembered() {
                self.idle.push((at, key.clone()));
            }
        }
    }
}

/// The most keys with no due job a floor passes: beyond them, walks pass the rest.
const STUCK: usize = 8;
/// The rows of keys with no waiting job, due or not, that one walk passes before it asks the
/// background worker to prune the turns now (src/wakes.rs, `ask_prune`) rather than at its next
/// pass. Such rows keep their place at the front while every key served goes to the back, so
/// every walk passes all of them, each a descent of ready_fair whenever a job made ready
/// anywhere has made this backend forget its idle keys. Measured in bench/fairness.sh, where
/// the 999 small tenants run out of jobs within one turn: claims took 10 to 16 ms (2.5 before)
/// and 16 clients did a fifth of their rate for the 0.6 s until the pass dropped the rows
/// (otherwise a walk there reads some 13 rows a claim, half of them keys with no due job).
const PRUNE_ASK: usize = 64;
/// The most rows with no due job after a floor whose entries the next walk passes without
/// reading them ([`Floor`]'s `idle`).
const IDLE_KEPT: usize = 64;

/// Window `i` of `served` that a walk from a floor reads (`Turns::each_turn`): twice as wide as
/// the last walk from the floor went (`reach`, at least 16), then twice as wide at each one
/// after the second, [`WINDOWS`] of them before the rest in one scan. `served` counts every key's
/// moves to the back, so a window of 16 holds at most 16 rows and dead versions of this queue.
/// A floor lags the front by the moves made since its walk, most of them by other checkouts at
/// 16 clients, whose old entries (killed once dead to all) fill the span between: each window
/// is a descent of the index, and windows of 16 took 5.3 descents a claim (bench/fairness.sh's
/// profile), where the next walk goes as far as the last one did and the moves since.
fn window(i: u32, reach: i64) -> i64 {
    (2 * reach).clamp(16, 1 << 20) << i.saturating_sub(1)
}
const WINDOWS: u32 = 10;

/// Which queue's turns (jobq.fairness's oid, queue) at or from which priority: a floor's
/// ([`FLOORS`]) and a top priority's ([`TOP`]).
type TopId = (pg_sys::Oid, Vec<u8>, i32);
/// Which key of which queue's turns at which priority ([`IDLE`]).
type IdleId = (TopId, Key);

/// What a backend remembers under one count of rows made ready ([`READY_ADDED`]): all of it
/// forgotten when the count has moved, when it holds `cap` entries, and at an abort
/// ([`forget`]).
struct Memo<K, V> {
    count: u64,
    cap: usize,
    map: HashMap<K, V>,
}

impl<K: Eq + Hash, V: Copy> Memo<K, V> {
    fn new(cap: usize) -> Self {
        Memo { count: 0, cap, map: HashMap::new() }
    }

    /// What was remembered of `k` under count `n`.
    fn get(&self, n: u64, k: &K) -> Option<V> {
        if self.count == n { self.map.get(k).copied() } else { None }
    }

    /// Remembers `v` of `k` under count `n`.
    fn put(&mut self, n: u64, k: K, v: V) {
        crate::xact::watch(); // forgotten at an abort
        if self.count != n || self.map.len() >= self.cap {
            self.count = n;
            self.map.clear();
        }
        self.map.insert(k, v);
    }
}

/// Counts one more event in `count`, the lowest key it added being `low` ([`Lows`]).
fn count_low<T: Copy, const N: usize>(count: &PgAtomic<AtomicU64>, lows: &PgLwLock<Lows<T, N>>, low: T) {
    if ENABLED.load(Ordering::Relaxed) {
        let mut lows = lows.exclusive();
        let n = count.get().fetch_add(1, Ordering::AcqRel) + 1;
        lows.at[n as usize % N] = (n, low);
    }
}

/// Whether every event counted after count `from`, up to `to`, added keys at or after `start`
/// only: false where `lows` no longer holds them all.
fn lows_after<T: Copy + PartialOrd, const N: usize>(lows: &PgLwLock<Lows<T, N>>, from: u64, to: u64, start: T) -> bool {
    if to < from || to - from > N as u64 {
        return false;
    }
    let lows = lows.share();
    (from + 1..=to).all(|m| {
        let (count, low) = lows.at[m as usize % N];
        count == m && low >= start
    })
}

/// Counts an insert of turns (at the insert, and at its commit) whose lowest `served` is `low`.
pub fn added(low: i64) {
    count_low(&TURNS_ADDED, &ADDS, low);
}

/// Forgets this backend's floors of the turns and what it remembered of idle keys, top
/// priorities and where its scans of keys start, at the abort of a transaction or
/// subtransaction, and at PREPARE (src/xact.rs): they may come from its own claims and moves,
/// which the rollback undoes, and no count moves then.
pub fn forget() {
    FLOORS.with(|f| f.try_borrow_mut().map(|mut f| f.clear()).ok());
    forget_memos();
}

/// A row made ready by this transaction (at the note of its key for the floors): this backend's
/// own walks see it now, and forget what they remembered of idle keys and top priorities; the
/// others', once its commit counts it ([`made_ready`]).
pub fn made_ready_here() {
    forget_memos();
}

/// Forgets what this backend remembered of idle keys ([`IDLE`]), top priorities ([`TOP`]) and
/// where its scans of keys start ([`START`]).
fn forget_memos() {
    IDLE.with(|m| m.try_borrow_mut().map(|mut m| m.map.clear()).ok());
    TOP.with(|m| m.try_borrow_mut().map(|mut m| m.map.clear()).ok());
    START.with(|m| m.try_borrow_mut().map(|mut m| m.clear()).ok());
}

/// Counts the commit of a transaction that made rows ready, the lowest of whose claim keys is
/// `low`.
pub fn made_ready(low: crate::floors::Key) {
    count_low(&READY_ADDED, &READIES, low);
}

/// The counts of inserts of turns and of rows made ready, read before a walk's snapshot.
#[derive(Clone, Copy)]
pub struct Counts {
    turns: u64,
    ready: u64,
}

/// The counts, to be read before the snapshot a walk will use; None without the preload.
pub fn counts() -> Option<Counts> {
    ENABLED.load(Ordering::Relaxed).then(|| Counts {
        ready: READY_ADDED.get().load(Ordering::Acquire),
        turns: TURNS_ADDED.get().load(Ordering::Acquire),
    })
}

/// A fair queue's turns, for the fast path of checkout (src/checkout.rs): a checkout of one
/// queue, in READ COMMITTED, claims here what `jobq._fair_claim` (src/sql/fairness.sql) would
/// claim, against the table and index access methods. It is a second copy of that rule, kept
/// for speed: the SQL's claim cost a fair checkout about three quarters of its time
/// (bench/results/fairness-profile.md), and tests/fairness.rs checks that the two agree.
pub struct Turns {
    rel: pg_sys::Relation,      // jobq.fairness
    by_turn: pg_sys::Relation,  // fairness_by_turn (queue_hash, priority, served)
    fair: pg_sys::Relation,     // ready_fair (queue_hash, priority, fairness_key, run_at, id)
    by_queue: pg_sys::Relation, // ready_by_queue (queue_hash, priority, run_at, id)
    entries: IndexEntries,      // of a row moved to the back
    turns: pg_sys::Oid,         // jobq.fairness_turns
    queue: pg_sys::Datum,
    hash: pg_sys::Datum,
    counts: Option<Counts>, // read before this call's snapshot
    // jobq.fairness, 0-based
    queue_col: usize,
    key: usize,
    weight: usize,
    served: usize,
    taken: usize,
}

/// A key of a fair queue: its name, None for the queue's jobs without one.
type Key = Option<Vec<u8>>;

/// What a walk of the turns did with a row.
enum Step {
    /// Passed it; on to the next.
    Pass,
    /// Took its key's turn: the walk is over.
    Stop,
}

/// Whether the row's header says that a transaction other than this one, still running, holds
/// or changes it (read without the buffer's lock: a hint, which the lock confirms).
unsafe fn locked_by_another(row: pg_sys::HeapTuple) -> bool {
    let h = (*row).t_data;
    let mask = (*h).t_infomask as u32;
    if mask & pg_sys::HEAP_XMAX_INVALID != 0 || mask & pg_sys::HEAP_XMAX_IS_MULTI != 0 {
        return false;
    }
    let xmax = (*h).t_choice.t_heap.t_xmax;
    xmax != pg_sys::InvalidTransactionId && !pg_sys::TransactionIdIsCurrentTransactionId(xmax) && pg_sys::TransactionIdIsInProgress(xmax)
}

impl Turns {
    /// The turns of queue `queue` (a text datum) when it takes turns; Some(None) when it does
    /// not (the plain walk serves it); None, having changed nothing, when a table or index is
    /// not what is named here (then the SQL serves).
    /// `counts`: [`counts`], read before the call's snapshot.
    pub unsafe fn open(
        nsp: pg_sys::Oid,
        queue: pg_sys::Datum,
        ready: pg_sys::Relation,
        l: &Layout,
        snapshot: pg_sys::Snapshot,
        counts: Option<Counts>,
    ) -> Option<Option<Turns>> {
        let relid = |name: &'static CStr| crate::relids::relation(nsp, name);
        let ids = [
            relid(c"fairness"),
            relid(c"fairness_by_turn"),
            relid(c"ready_fair"),
            relid(c"ready_by_queue"),
            relid(c"fairness_turns"),
        ];
        if ids.contains(&pg_sys::InvalidOid) {
            return None;
        }
        let share = pg_sys::AccessShareLock as i32;
        let rel = pg_sys::table_open(ids[0], pg_sys::RowExclusiveLock as i32);
        let by_turn = pg_sys::index_open(ids[1], share);
        let fair = pg_sys::index_open(ids[2], share);
        let by_queue = pg_sys::index_open(ids[3], share);
        let close = || {
            let no = pg_sys::NoLock as i32;
            pg_sys::index_close(by_queue, no);
            pg_sys::index_close(fair, no);
            pg_sys::index_close(by_turn, no);
            pg_sys::table_close(rel, no);
        };
        let desc = (*rel).rd_att;
        let col = |name, typ| column_of(desc, name, typ);
        let cols = (|| {
            Some([
                col("queue", pg_sys::TEXTOID)?,
                col("fairness_key", pg_sys::TEXTOID)?,
                col("priority", pg_sys::INT4OID)?,
                col("weight", pg_sys::INT4OID)?,
                col("served", pg_sys::INT8OID)?,
                col("taken", pg_sys::INT4OID)?,
                col("queue_hash", pg_sys::INT4OID)?,
            ])
        })();
        let r_key = column((*ready).rd_att, "fairness_key").map(|i| (i + 1) as i16);
        let trig = (*rel).trigdesc;
        let updated = !trig.is_null()
            && ((*trig).trig_update_before_row || (*trig).trig_update_after_row || (*trig).trig_update_instead_row
                || (*trig).trig_update_before_statement || (*trig).trig_update_after_statement);
        let fits = match (cols, r_key) {
            (Some(c), Some(rk)) => {
                let a = |i: usize| (c[i] + 1) as i16;
                !updated
                    && keys_are(by_turn, &[a(6), a(2), a(4)])
                    && keys_are(fair, &[l.r_queue_hash, l.r_priority, rk, l.r_run_at, l.r_id])
                    && keys_are(by_queue, &[l.r_queue_hash, l.r_priority, l.r_run_at, l.r_id])
            }
            _ => false,
        };
        if !fits {
            close();
            return None;
        }
        let c = cols.unwrap();
        let set = [(c[4] + 1) as i16, (c[5] + 1) as i16];
        let t = Turns {
            rel,
            by_turn,
            fair,
            by_queue,
            entries: IndexEntries::open(rel, Some(&set)),
            turns: ids[4],
            queue,
            hash: crate::rows::hashtext(queue),
            counts,
            queue_col: c[0],
            key: c[1],
            weight: c[3],
            served: c[4],
            taken: c[5],
        };
        // Whether the queue has a row. Yes, where this backend keeps a floor of it that the
        // inserts of turns since have kept (a row deleted since leaves a queue whose walks find no
        // turns, which serve its jobs in claim order: what the plain walk does). Otherwise one
        // descent of fairness_by_key, among the rows' copies (jobq.fairness_keys).
        let name = text(queue);
        if counts.is_some_and(|n| FLOORS.with(|f| f.borrow_mut().iter_mut().any(|fl| fl.id.0 == ids[0] && fl.id.1 == name && fl.current(n.turns)))) {
            return Some(Some(t));
        }
        let Some(any) = has_keys(nsp, queue, snapshot) else {
            t.close();
            return None;
        };
        if !any {
            t.close();
            return Some(None);
        }
        Some(Some(t))
    }

    pub unsafe fn close(self) {
        self.entries.close();
        let no = pg_sys::NoLock as i32;
        pg_sys::index_close(self.by_queue, no);
        pg_sys::index_close(self.fair, no);
        pg_sys::index_close(self.by_turn, no);
        pg_sys::table_close(self.rel, no);
    }

    /// Calls `each` with the queue's rows of jobq.fairness at `priority` from `start` (a
    /// `served`) on, in turn order (least recently served first), with each one's key and
    /// `served`, until it says [`Step::Stop`].
    ///
    /// From a floor, in windows of `served` ([`window`]): a btree scan tests every entry of a
    /// leaf page that its keys accept when it reaches the page (PostgreSQL 15's
    /// `_bt_readpage`), and a walk stops after a few rows, so an open-ended scan would test the
    /// rest of the page's entries at every claim, dead versions of moved rows included. A
    /// window's upper bound ends the page's read where the window ends; a window with no entry
    /// ends the windows (the rest in one scan). From the front (no floor), there is no
    /// `served` to count from: one scan.
    ///
    /// An entry whose `served` `idle` names (with its key) is passed to `each` without its row
    /// (None): a row this backend knows has no due job.
    unsafe fn each_turn(
        &self,
        priority: i32,
        start: Option<(i64, i64)>,
        snapshot: pg_sys::Snapshot,
        mut idle: impl FnMut(i64) -> Option<Key>,
        mut each: impl FnMut(Option<pg_sys::HeapTuple>, Key, i64) -> Step,
    ) {
        let oid = pg_sys::Oid::from;
        let (eq, ge, lt) = (pg_sys::BTEqualStrategyNumber as u16, pg_sys::BTGreaterEqualStrategyNumber as u16, pg_sys::BTLessStrategyNumber as u16);
        let (mut from, reach) = start.unwrap_or((i64::MIN, 0));
        let mut windows = if start.is_some() { WINDOWS } else { 0 };
        for i in 0.. {
            let to = (i < windows).then(|| from.saturating_add(window(i, reach)));
            let mut keys: [pg_sys::ScanKeyData; 4] = std::mem::zeroed();
            pg_sys::ScanKeyEntryInitialize(&mut keys[0], 0, 1, eq, pg_sys::INT4OID, pg_sys::InvalidOid, oid(pg_sys::F_INT4EQ), self.hash);
            pg_sys::ScanKeyEntryInitialize(&mut keys[1], 0, 2, eq, pg_sys::INT4OID, pg_sys::InvalidOid, oid(pg_sys::F_INT4EQ), pg_sys::Datum::from(priority));
            pg_sys::ScanKeyEntryInitialize(&mut keys[2], 0, 3, ge, pg_sys::INT8OID, pg_sys::InvalidOid, oid(pg_sys::F_INT8GE), pg_sys::Datum::from(from));
            let n = match to {
                Some(to) => {
                    pg_sys::ScanKeyEntryInitialize(&mut keys[3], 0, 3, lt, pg_sys::INT8OID, pg_sys::InvalidOid, oid(pg_sys::F_INT8LT), pg_sys::Datum::from(to));
                    4
                }
                None => 3,
            };
            let mut stopped = false;
            let read = scan_served(self.rel, self.by_turn, snapshot, &mut keys[..n], &mut idle, |slot, served| {
                let step = match slot {
                    Err(key) => each(None, key, served),
                    Ok(slot) => {
                        let t = pg_sys::ExecFetchSlotHeapTuple(slot, false, null_mut());
                        if !self.ours(self.rel, (self.queue_col + 1) as i16, t) {
                            return true; // another queue's, whose name has the same hash
                        }
                        let key = attr(t, (*self.rel).rd_att, (self.key + 1) as i32).map(|d| text(d).to_vec());
                        each(Some(t), key, served)
                    }
                };
                stopped = matches!(step, Step::Stop);
                !stopped
            });
            match to {
                Some(to) if !stopped => from = to,
                _ => return,
            }
            if read == 0 {
                // Past the queue's last row, or a gap as wide: the rest in one scan (a walk
                // that found no key to serve ran every window to the end).
                windows = i + 1;
            }
        }
    }

    /// This backend's floor of the queue at `priority` ([`TURNS_ADDED`]): where its walk may
    /// start, how far the last walk from it went, and the keys passed below it for having no
    /// due job; None when there is none, or
    /// when one of those keys has a due job now (its row is below the floor: the walk starts at
    /// the front).
    #[allow(clippy::type_complexity)]
    unsafe fn floor(&self, c: &Claimer, priority: i32, snapshot: pg_sys::Snapshot) -> Option<((i64, i64), Vec<Key>, Vec<(i64, Key)>)> {
        let n = self.counts?.turns;
        let id = self.floor_id(priority);
        let (start, stuck, idle) = FLOORS.with(|f| {
            let mut f = f.borrow_mut();
            let fl = f.iter_mut().find(|fl| fl.id == id)?;
            fl.current(n).then(|| ((fl.start, fl.reach), fl.stuck.clone(), std::mem::take(&mut fl.idle)))
        })?;
        stuck.iter().all(|k| self.due(c, k.as_deref(), priority, snapshot).is_none()).then_some((start, stuck, idle))
    }

    /// Which floor: of this queue's turns at `priority` (and which top priority, from it on).
    unsafe fn floor_id(&self, priority: i32) -> TopId {
        ((*self.rel).rd_id, text(self.queue).to_vec(), priority)
    }

    /// Keeps this backend's floor of the queue at `priority`, where the walk found one.
    unsafe fn keep_floor(&self, priority: i32, next: NextFloor) {
        let (Some(n), Some(start)) = (self.counts.map(|c| c.turns), next.start) else { return };
        let NextFloor { stuck, idle, last, .. } = next;
        let reach = last.map_or(0, |l| l.saturating_sub(start));
        crate::xact::watch(); // forgotten at an abort
        let id = self.floor_id(priority);
        FLOORS.with(|f| {
            let mut f = f.borrow_mut();
            f.retain(|fl| fl.id != id);
            if f.len() >= 64 {
                f.remove(0);
            }
            f.push(Floor { id, added: n, start, stuck, reach, idle });
        });
    }

    /// Calls `each` with the ready rows of key `key` at `priority` in this queue, in claim
    /// order (run_at, id), until it returns false: ready_by_queue's rows for the jobs without
    /// a key, ready_fair's for a key's. With `now`, the due ones only. The scan starts where
    /// this backend's last scan of the key found its first row ([`START`]).
    #[allow(clippy::too_many_arguments)]
    unsafe fn each_due(
        &self,
        ready: pg_sys::Relation,
        l: &Layout,
        now: Option<pg_sys::TimestampTz>,
        key: Option<&[u8]>,
        priority: i32,
        snapshot: pg_sys::Snapshot,
        mut each: impl FnMut(*mut pg_sys::TupleTableSlot) -> bool,
    ) {
        let oid = pg_sys::Oid::from;
        let (eq, le) = (pg_sys::BTEqualStrategyNumber as u16, pg_sys::BTLessEqualStrategyNumber as u16);
        let mut keys: [pg_sys::ScanKeyData; 5] = std::mem::zeroed();
        pg_sys::ScanKeyEntryInitialize(&mut keys[0], 0, 1, eq, pg_sys::INT4OID, pg_sys::InvalidOid, oid(pg_sys::F_INT4EQ), self.hash);
        pg_sys::ScanKeyEntryInitialize(&mut keys[1], 0, 2, eq, pg_sys::INT4OID, pg_sys::InvalidOid, oid(pg_sys::F_INT4EQ), pg_sys::Datum::from(priority));
        let mut at = 3;
        let index = match key {
            None => self.by_queue,
            Some(k) => {
                let coll = *(*self.fair).rd_indcollation.add(2);
                let k = text_datum(k);
                pg_sys::ScanKeyEntryInitialize(&mut keys[2], 0, 3, eq, pg_sys::InvalidOid, coll, oid(pg_sys::F_TEXTEQ), k);
                at = 4;
                self.fair
            }
        };
        let mut n = at as usize - 1;
        // From where this backend's last look at the key found its first row ([`START`]):
        // (run_at, id) >= that row's, a row comparison on the index's last two columns.
        let memo = self.counts.map(|c| (c.ready, (self.floor_id(priority), key.map(<[u8]>::to_vec))));
        let start = memo.as_ref().and_then(|(n, id)| {
            START.with(|m| {
                let mut m = m.borrow_mut();
                let e = m.get_mut(id)?;
                if e.2 != *n {
                    if !lows_after(&READIES, e.2, *n, (priority, e.0, e.1)) {
                        return None;
                    }
                    e.2 = *n;
                }
                Some((e.0, e.1))
            })
        });
        let mut row: [pg_sys::ScanKeyData; 2] = std::mem::zeroed();
        if let Some((run_at, id)) = start {
            let from = [(pg_sys::TIMESTAMPTZOID, pg_sys::F_TIMESTAMPTZ_CMP, pg_sys::Datum::from(run_at)), (pg_sys::INT8OID, pg_sys::F_BTINT8CMP, pg_sys::Datum::from(id))];
            crate::rows::row_ge(&mut keys[n], &mut row, at, &from);
            n += 1;
        }
        if let Some(now) = now {
            pg_sys::ScanKeyEntryInitialize(&mut keys[n], 0, at, le, pg_sys::TIMESTAMPTZOID, pg_sys::InvalidOid, oid(pg_sys::F_TIMESTAMPTZ_LE), pg_sys::Datum::from(now));
            n += 1;
        }
        let mut first = None; // the first row the scan returns: (run_at, id)
        scan(ready, index, snapshot, &mut keys[..n], |slot| {
            let t = pg_sys::ExecFetchSlotHeapTuple(slot, false, null_mut());
            if first.is_none() {
                let get = |attno: i16| attr(t, (*ready).rd_att, attno as i32).map_or(i64::MIN, |d| d.value() as i64);
                first = Some((get(l.r_run_at), get(l.r_id)));
            }
            !self.ours(ready, l.r_queue, t) || each(slot)
        });
        if let (Some((n, id)), Some(f)) = (memo, first) {
            if start != Some(f) {
                crate::xact::watch(); // forgotten at an abort
                START.with(|m| {
                    let mut m = m.borrow_mut();
                    if m.len() >= 4096 {
                        m.clear();
                    }
                    m.insert(id, (f.0, f.1, n));
                });
            }
        }
    }

    /// Whether row `t` of `rel`, whose queue name is attribute `attno`, is this queue's: the
    /// indexes of jobq.ready and fairness_by_turn lead with the name's hash, which another
    /// queue's name may share.
    unsafe fn ours(&self, rel: pg_sys::Relation, attno: i16, t: pg_sys::HeapTuple) -> bool {
        attr(t, (*rel).rd_att, attno as i32).is_some_and(|d| text(d) == text(self.queue))
    }

    /// The ready row of key `key`'s oldest due job at `priority` that no pause holds back, when
    /// it has one (jobq._fair_due): none, without a look, where this backend found none since
    /// the last row made ready and before the first of its jobs to come is due ([`IDLE`]).
    unsafe fn due(&self, c: &Claimer, key: Option<&[u8]>, priority: i32, snapshot: pg_sys::Snapshot) -> Option<pg_sys::ItemPointerData> {
        let ready = self.counts.map(|n| n.ready);
        let id = || (self.floor_id(priority), key.map(<[u8]>::to_vec));
        if self.idle(c.now, key, priority) {
            return None;
        }
        let (l, now) = (c.layout(), c.now);
        let (mut found, mut held, mut until) = (None, false, i64::MAX);
        self.each_due(c.ready(), l, None, key, priority, snapshot, |slot| {
            let t = pg_sys::ExecFetchSlotHeapTuple(slot, false, null_mut());
            let run_at = attr(t, (*c.ready()).rd_att, l.r_run_at as i32).map_or(i64::MIN, |d| d.value() as i64);
            if run_at > now {
                until = run_at;
                return false;
            }
            if c.paused(t) {
                held = true;
                return true;
            }
            found = Some((*slot).tts_tid);
            false
        });
        if let (None, false, Some(n)) = (found, held, ready) {
            IDLE.with(|m| m.borrow_mut().put(n, id(), until));
        }
        found
    }

    /// What this backend remembers of key `key` at `priority` having no due job ([`IDLE`]): the
    /// run_at of its first job to come (i64::MAX: none waits at all); None when nothing is
    /// remembered under the current count.
    unsafe fn idle_until(&self, key: Option<&[u8]>, priority: i32) -> Option<i64> {
        let n = self.counts?.ready;
        let id = (self.floor_id(priority), key.map(<[u8]>::to_vec));
        IDLE.with(|m| m.borrow().get(n, &id))
    }

    /// Whether this backend remembers key `key` at `priority` as having no waiting job at all,
    /// due or not: a row the pass drops (the queue's row for its jobs without a key excepted).
    unsafe fn gone(&self, key: Option<&[u8]>, priority: i32) -> bool {
        key.is_some() && self.idle_until(key, priority) == Some(i64::MAX)
    }

    /// Whether this backend remembers key `key` at `priority` as having no due job ([`IDLE`]).
    unsafe fn idle(&self, now: pg_sys::TimestampTz, key: Option<&[u8]>, priority: i32) -> bool {
        self.idle_until(key, priority).is_some_and(|until| now < until)
    }

    /// The claim of the job whose ready row `tid` the look for a due job found first (the
    /// row a walk of the key's due jobs would try first), without a second descent of the
    /// index: what it did, when it started the job or found its row changed; None when it
    /// passed the job (another checkout holds it) or the job has keys (whose claim may leave
    /// it locked: then the walk of the key's jobs tries it, as it tries every one).
    unsafe fn take_first(&self, c: &mut Claimer, mut tid: pg_sys::ItemPointerData, snapshot: pg_sys::Snapshot) -> Option<Took> {
        let ready = c.ready();
        let slot = pg_sys::table_slot_create(ready, null_mut());
        let mut took = None;
        if pg_sys::table_tuple_fetch_row_version(ready, &mut tid, snapshot, slot) {
            let t = pg_sys::ExecFetchSlotHeapTuple(slot, false, null_mut());
            let keyed = attr(t, (*ready).rd_att, c.layout().r_keyed).is_some_and(|d| d.value() != 0);
            if !keyed {
                took = match c.try_row(slot, snapshot) {
                    Took::Passed => None,
                    t => Some(t),
                };
            }
        }
        pg_sys::ExecDropSingleTupleTableSlot(slot);
        took
    }

    /// The queue's top due priority from `lowest` on, of its jobs with a key and without one
    /// (jobq._fair_top): remembered ([`TOP`]) where the first job from `lowest` on of each index
    /// is due, or there is none (then no job to come can be above it).
    unsafe fn top(&self, c: &Claimer, lowest: i32, snapshot: pg_sys::Snapshot) -> Option<i32> {
        let ready = self.counts.map(|n| n.ready);
        if let Some(p) = ready.and_then(|n| TOP.with(|m| m.borrow().get(n, &self.floor_id(lowest)))) {
            return p;
        }
        let mut best: Option<i32> = None;
        let mut exact = true; // every index's first job is due, or it has none
        for (index, run_at) in [(self.by_queue, 3i16), (self.fair, 4i16)] {
            let first = self.first(c, index, lowest, None, snapshot);
            let p = match first {
                Some((_, at)) if at > c.now => {
                    exact = false;
                    self.first(c, index, lowest, Some(run_at), snapshot).map(|(p, _)| p)
                }
                f => f.map(|(p, _)| p),
            };
            if let Some(p) = p {
                best = Some(best.map_or(p, |b| b.min(p)));
            }
        }
        if let (true, Some(n)) = (exact, ready) {
            TOP.with(|m| m.borrow_mut().put(n, self.floor_id(lowest), best));
        }
        best
    }

    /// The priority and run_at of this queue's first ready row in `index` (ready_by_queue or
    /// ready_fair) at `lowest` or after, in the index's order; with `due` (the index's column
    /// of run_at), its first due one.
    unsafe fn first(&self, c: &Claimer, index: pg_sys::Relation, lowest: i32, due: Option<i16>, snapshot: pg_sys::Snapshot) -> Option<(i32, i64)> {
        let oid = pg_sys::Oid::from;
        let (l, ready) = (c.layout(), c.ready());
        let mut keys: [pg_sys::ScanKeyData; 3] = std::mem::zeroed();
        pg_sys::ScanKeyEntryInitialize(&mut keys[0], 0, 1, pg_sys::BTEqualStrategyNumber as u16, pg_sys::INT4OID, pg_sys::InvalidOid, oid(pg_sys::F_INT4EQ), self.hash);
        pg_sys::ScanKeyEntryInitialize(&mut keys[1], 0, 2, pg_sys::BTGreaterEqualStrategyNumber as u16, pg_sys::INT4OID, pg_sys::InvalidOid, oid(pg_sys::F_INT4GE), pg_sys::Datum::from(lowest));
        let n = match due {
            Some(col) => {
                pg_sys::ScanKeyEntryInitialize(&mut keys[2], 0, col, pg_sys::BTLessEqualStrategyNumber as u16, pg_sys::TIMESTAMPTZOID, pg_sys::InvalidOid, oid(pg_sys::F_TIMESTAMPTZ_LE), pg_sys::Datum::from(c.now));
                3
            }
            None => 2,
        };
        let mut found = None;
        scan(ready, index, snapshot, &mut keys[..n], |slot| {
            let t = pg_sys::ExecFetchSlotHeapTuple(slot, false, null_mut());
            if !self.ours(ready, l.r_queue, t) {
                return true;
            }
            let get = |attno: i16| attr(t, (*ready).rd_att, attno as i32).map(|d| d.value() as i64);
            found = Some((get(l.r_priority).map_or(i32::MAX, |p| p as i32), get(l.r_run_at).unwrap_or(i64::MIN)));
            false
        });
        found
    }

    /// One claim (jobq._fair_claim, READ COMMITTED): at the queue's top due priority where a
    /// key can start a job, the key whose turn it is (least recently served, not yielded in
    /// this call, with a due job, its row locked without waiting; any such key when every one
    /// is held by another checkout), its oldest due job that can start claimed, and the key
    /// moved to the back once it had its weight's jobs in this turn. A key none of whose due
    /// jobs can be taken yields its turn at that priority for the rest of the call (`skip`).
    /// A key whose row another checkout holds, by the row's header, is passed before the test
    /// for a due job (one descent of ready_fair fewer for each, about ten a claim at 16
    /// clients), as the SQL passes a row whose xmax is a running transaction.
    unsafe fn claim_one(&self, c: &mut Claimer, skip: &mut Vec<(i32, Key)>, snapshot: pg_sys::Snapshot) -> Took {
        let (ready, l, now) = (c.ready(), *c.layout(), c.now);
        // The key's oldest due job that can start, claimed: Some(what the claim did), None
        // when the key has no due job that no pause holds back.
        let try_key = |c: &mut Claimer, key: Option<&[u8]>, p: i32| -> Option<Took> {
            let mut took = None;
            self.each_due(ready, &l, Some(now), key, p, snapshot, |slot| {
                if c.paused(pg_sys::ExecFetchSlotHeapTuple(slot, false, null_mut())) {
                    return true;
                }
                let t = c.try_row(slot, snapshot);
                let more = matches!(t, Took::Passed);
                took = Some(t);
                more
            });
            took
        };
        let mut from = i32::MIN;
        loop {
            let Some(p) = self.top(c, from, snapshot) else { return Took::Passed };
            let cid = pg_sys::GetCurrentCommandId(true);
            let skipped = |skip: &Vec<(i32, Key)>, key: &Key| skip.iter().any(|(sp, sk)| *sp == p && sk == key);
            let mut took = Took::Passed;
            let mut served = None; // the row of the key served
            let mut held = Vec::new(); // the keys whose rows other checkouts hold, in turn order
            let mut any = false;
            // From this backend's floor; the new floor is the first row not passed for having
            // no due job (those, up to STUCK, are kept with it).
            let (start, stuck, idle) = match self.floor(c, p, snapshot) {
                Some((start, stuck, idle)) => (Some(start), stuck, idle),
                None => (None, Vec::new(), Vec::new()),
            };
            let mut next = NextFloor { start: None, stuck, idle: Vec::new(), last: None };
            let mut gone = 0; // rows passed whose keys have no waiting job ([`PRUNE_ASK`])
            // A row the last walk found with no due job, whose key this backend still
            // remembers so: passed by its index entry.
            let known = |served: i64| {
                let (_, key) = idle.iter().find(|(s, _)| *s == served)?;
                self.idle(now, key.as_deref(), p).then(|| key.clone())
            };
            self.each_turn(p, start, snapshot, known, |row, key, at| {
                let Some(row) = row else {
                    next.saw(&key, at, true, || true);
                    gone += self.gone(key.as_deref(), p) as usize;
                    return Step::Pass;
                };
                any = true;
                // A row another checkout holds is passed over without a look at its key's jobs
                // (its header read as it is: a lock taken or released meanwhile is sorted out
                // by the lock below, or by the look at the held keys after the walk); a key with
                // no due job, before its row is locked (the pass drops the row of a key with no
                // waiting job, and passes over a row a checkout holds).
                let mut first = None; // the key's oldest due job's ready row
                let step = if skipped(skip, &key) || held.contains(&key) {
                    Some(false)
                } else if locked_by_another(row) {
                    held.push(key.clone());
                    Some(false)
                } else if let Some(tid) = self.due(c, key.as_deref(), p, snapshot) {
                    first = Some(tid);
                    None
                } else {
                    Some(true)
                };
                next.saw(&key, at, step == Some(true), || self.idle(now, key.as_deref(), p));
                gone += (step == Some(true) && self.gone(key.as_deref(), p)) as usize;
                if step.is_some() {
                    return Step::Pass;
                }
                match lock(self.rel, (*row).t_self, cid) {
                    pg_sys::TM_Result::TM_Ok => match first.and_then(|tid| self.take_first(c, tid, snapshot)).or_else(|| try_key(c, key.as_deref(), p)) {
                        None => Step::Pass,
                        Some(Took::Passed) => {
                            skip.push((p, key)); // none can start: it yields its turn
                            Step::Pass
                        }
                        Some(t) => {
                            took = t;
                            served = Some(pg_sys::heap_copytuple(row));
                            Step::Stop
                        }
                    },
                    // Held by another checkout, or moved by one that committed since this
                    // call's snapshot (READ COMMITTED's FOR UPDATE would lock its new version,
                    // behind): either way the key may still be served, without moving it.
                    pg_sys::TM_Result::TM_WouldBlock | pg_sys::TM_Result::TM_Updated => {
                        held.push(key);
                        Step::Pass
                    }
                    _ => Step::Pass,
                }
            });
            self.keep_floor(p, next);
            if gone >= PRUNE_ASK {
                crate::wakes::ask_prune();
            }
            match took {
                Took::Started => {
                    if let Some(row) = served {
                        self.served(row, cid);
                    }
                    return Took::Started;
                }
                Took::Changed => return Took::Changed,
                Took::Passed => {}
            }
            // No key whose row this call could lock has a job it can start: a key whose row
            // another checkout holds, served without moving it.
            for key in held {
                if skipped(skip, &key) {
                    continue;
                }
                match try_key(c, key.as_deref(), p) {
                    None => {}
                    Some(Took::Passed) => skip.push((p, key)),
                    Some(t) => return t,
                }
            }
            // Where no key has a row at p, the jobs without one are all there is, and take no
            // turns: they are served, unless they yielded. (Where the walk read no row because
            // every one it met was a known idle one, this looks for them too: none are due
            // where the queue's jobs without a key have a row, which was passed as idle.)
            if !any && !skipped(skip, &None) {
                match try_key(c, None, p) {
                    None => {}
                    Some(Took::Passed) => skip.push((p, None)),
                    Some(t) => return t,
                }
            }
            if p == i32::MAX {
                return Took::Passed;
            }
            from = p + 1;
        }
    }

    /// The key of `row` (locked by this transaction) had one more job in its turn: to the back
    /// once it had its weight's, unless it is there already (jobq._fair_claim's rule: its
    /// `served` is the last the sequence gave, so no row is behind it, and a row added later
    /// comes behind it either way). A key served alone keeps its row, its weight 1 unwritten.
    /// The sequence is read only for a key whose `served` the last claim left ([`LAST_SERVED`];
    /// without the preload, never: every key is moved).
    unsafe fn served(&self, row: pg_sys::HeapTuple, cid: pg_sys::CommandId) {
        let desc = (*self.rel).rd_att;
        let natts = (*desc).natts as usize;
        let mut values = vec![pg_sys::Datum::from(0usize); natts];
        let mut nulls = vec![false; natts];
        pg_sys::heap_deform_tuple(row, desc, values.as_mut_ptr(), nulls.as_mut_ptr());
        let was = values[self.taken].value() as i32;
        if was + 1 >= values[self.weight].value() as i32 {
            values[self.taken] = pg_sys::Datum::from(0i32);
            let served = values[self.served].value() as i64;
            let enabled = ENABLED.load(Ordering::Relaxed);
            let at_back = enabled && LAST_SERVED.get().load(Ordering::Relaxed) == served && crate::rows::sequence_last_value(self.turns) == Some(served);
            if !at_back {
                values[self.served] = pg_sys::DirectFunctionCall1Coll(Some(sql_fn::nextval_oid), pg_sys::InvalidOid, pg_sys::Datum::from(self.turns));
            }
            if enabled {
                LAST_SERVED.get().store(values[self.served].value() as i64, Ordering::Relaxed);
            }
            if at_back && was == 0 {
                return; // nothing changes
            }
        } else {
            values[self.taken] = pg_sys::Datum::from(was + 1);
        }
        let new = pg_sys::heap_form_tuple(desc, values.as_mut_ptr(), nulls.as_mut_ptr());
        if !self.entries.update(self.rel, &mut (*row).t_self, new, cid) {
            error!("jobq: a fairness row this checkout holds changed");
        }
    }
}

/// Up to `max` jobs of the fair queue of `t`, claimed in its turns; whether the SQL must look
/// for the rest (a ready row changed since the call's snapshot).
pub unsafe fn claim(c: &mut Claimer, t: &Turns, max: i32) -> (i32, bool) {
    let mut skip = Vec::new();
    let mut n = 0;
    while n < max {
        match t.claim_one(c, &mut skip, pg_sys::GetActiveSnapshot()) {
            Took::Started => n += 1,
            Took::Changed => return (n, true),
            Took::Passed => break,
        }
        // The next claim sees this one's writes (its key's row moved), as the SQL's next
        // statement does.
        pg_sys::CommandCounterIncrement();
        pg_sys::UpdateActiveSnapshotCommandId();
    }
    (n, false)
}

/// An index scan of `rel` through `index` with `keys`, as [`scan`], of an index whose third
/// column is an int8 (`served`): each entry's value is read from the entry first, and `each`
/// gets what `known` says of an entry it knows (Err), whose row is not read; the row's slot,
/// when it is visible, for the others (Ok). Returns how many entries it read.
unsafe fn scan_served<K>(
    rel: pg_sys::Relation,
    index: pg_sys::Relation,
    snapshot: pg_sys::Snapshot,
    keys: &mut [pg_sys::ScanKeyData],
    mut known: impl FnMut(i64) -> Option<K>,
    mut each: impl FnMut(Result<*mut pg_sys::TupleTableSlot, K>, i64) -> bool,
) -> usize {
    let s = crate::rows::begin_index_scan(rel, index, snapshot, keys, true);
    let slot = pg_sys::table_slot_create(rel, null_mut());
    let mut read = 0;
    loop {
        if pg_sys::index_getnext_tid(s, pg_sys::ScanDirection::ForwardScanDirection).is_null() {
            break;
        }
        read += 1;
        let served = pg_sys::nocache_index_getattr((*s).xs_itup, 3, (*s).xs_itupdesc).value() as i64;
        let more = if let Some(k) = known(served) {
            each(Err(k), served)
        } else {
            // index_getnext_slot's fetch: the visible member of the entry's chain, if any.
            let mut visible = false;
            while !visible {
                visible = pg_sys::index_fetch_heap(s, slot);
                if !(*s).xs_heap_continue {
                    break;
                }
            }
            !visible || each(Ok(slot), served)
        };
        if !more {
            break;
        }
    }
    pg_sys::ExecDropSingleTupleTableSlot(slot);
    pg_sys::index_endscan(s);
    read
}

/// An index scan of `rel` through `index` with `keys`, calling `each` with each row's slot
/// until it returns false.
unsafe fn scan(rel: pg_sys::Relation, index: pg_sys::Relation, snapshot: pg_sys::Snapshot, keys: &mut [pg_sys::ScanKeyData], mut each: impl FnMut(*mut pg_sys::TupleTableSlot) -> bool) {
    let s = crate::rows::begin_index_scan(rel, index, snapshot, keys, false);
    let slot = pg_sys::table_slot_create(rel, null_mut());
    while pg_sys::index_getnext_slot(s, pg_sys::ScanDirection::ForwardScanDirection, slot) {
        if !each(slot) {
            break;
        }
    }
    pg_sys::ExecDropSingleTupleTableSlot(slot);
    pg_sys::index_endscan(s);
}
