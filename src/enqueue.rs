//! `jobq_enqueue`, the start of every job, without a plan.
//!
//! Measured with perf at one client, the PL/pgSQL enqueue (`jobq._enqueue`, src/sql/enqueue.sql)
//! spent most of its time starting and ending the plans of its statements (the job row's
//! INSERT, `jobq._enter_ready` and its statement, the counters, the NOTIFY) and crossing the
//! function layer, not on the two rows it writes (docs/performance.md, "Enqueue"). So the common
//! enqueue is done here against the table and index access methods, as src/complete.rs does
//! for completion: the arguments checked; the id drawn from `jobq.jobs_id_seq`; a free unique
//! key (not `while_executing`) taken in `jobq.locks` as `jobq._take_key`'s `INSERT ... ON
//! CONFLICT DO NOTHING` takes it (a speculative insertion, src/rows.rs); `jobq.ready` locked
//! first (the hot tables' one lock order); the job row inserted into `jobq.live_jobs` and its
//! ready row into `jobq.ready`, each with its index entries; the claim floors lowered, the
//! waiting checkouts noted for the commit, the counter noted and the queue's listeners woken,
//! exactly as `jobq._insert_job` does them. The same rows, the same WAL, the same locks as the
//! SQL.
//!
//! A job with a fairness key is written here too, with its key in both rows; its key's rows of
//! `jobq.fairness` (its turns) are looked for as `jobq._fair_keys` looks (src/fairness.rs,
//! `has_turns`), and only when one is missing is the SQL's own `jobq._fair_keys` called, which
//! inserts it, as `jobq._enter_ready` calls it (src/sql/fairness.sql).
//!
//! Everything else goes to `jobq._enqueue`, the SQL that serves every case, before anything
//! was changed here: an argument the SQL refuses (it raises the documented error) or one out of
//! the common case (a NULL where the SQL has a default, a unique key whose taking failed: a
//! conflict, which the SQL resolves as `on_conflict` says), a REPEATABLE READ or SERIALIZABLE
//! transaction, a read-only transaction (refused there), and tables that carry triggers or
//! whose columns are not the ones named here. A key taken here for tables that turn out not to
//! be the expected ones is followed by `jobq._insert_job`, the SQL's own insert. The fast path
//! and the SQL are two copies of one operation; tests/lifecycle.rs and tests/keys.rs check the
//! rows each writes, and the saving is measured (docs/performance.md).
use crate::counters::jobq::tally;
use crate::kept::kept;
use crate::rows::{column, hashtext, insert, only_columns, sql_fn, text, IndexEntries, NewRow};
use pgrx::datum::DatumWithOid;
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::cell::Cell;
use std::ffi::CStr;

/// The arguments of `jobq_enqueue`, by position.
const QUEUE: usize = 0;
const PAYLOAD: usize = 1;
const KIND: usize = 2;
const PRIORITY: usize = 3;
const RUN_AT: usize = 4;
const MAX_ATTEMPTS: usize = 5;
const UNIQUE_KEY: usize = 6;
const UNIQUE_STRATEGY: usize = 7;
const ON_CONFLICT: usize = 8;
const CONCURRENCY_KEY: usize = 9;
const CONCURRENCY_LIMIT: usize = 10;
const RATE_KEY: usize = 11;
const DEPENDS_ON: usize = 12;
const ON_PARENT_FAILURE: usize = 13;
const FAIRNESS_KEY: usize = 14;
const ARGS: usize = 15;
/// The SQL that serves every case, with the first fourteen arguments: a job without a fairness
/// key, whatever release's SQL runs with this library (a fairness key needs 0.5's).
const EVERY_CASE: &str = "SELECT jobq._enqueue($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)";
/// The same with the fifteenth, the fairness key.
const FAIR_CASE: &str = "SELECT jobq._enqueue($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, fairness_key => $15)";
/// The SQL's own insert of a job whose id was drawn here (after the arguments), without and
/// with the fairness key, as above.
const INSERT: &str = "SELECT jobq._insert_job($15, $1, $2, $3, $4, coalesce($5, clock_timestamp()), $6, $7, $8, $10, $11, $12)";
const FAIR_INSERT: &str =
    "SELECT jobq._insert_job($16, $1, $2, $3, $4, coalesce($5, clock_timestamp()), $6, $7, $8, $10, $11, $12, fairness_key => $15)";
const TYPES: [pg_sys::Oid; ARGS] = [
    pg_sys::TEXTOID,
    pg_sys::JSONBOID,
    pg_sys::TEXTOID,
    pg_sys::INT4OID,
    pg_sys::TIMESTAMPTZOID,
    pg_sys::INT4OID,
    pg_sys::TEXTOID,
    pg_sys::TEXTOID,
    pg_sys::TEXTOID,
    pg_sys::TEXTOID,
    pg_sys::INT4OID,
    pg_sys::TEXTOID,
    pg_sys::INT8ARRAYOID,
    pg_sys::TEXTOID,
    pg_sys::TEXTOID,
];

/// Where the columns are, 0-based, in `jobq.live_jobs` (`rel`) and `jobq.ready` (`ready`);
/// found once per backend and pair of tables.
#[derive(Copy, Clone)]
struct Columns {
    rel: pg_sys::Oid,
    ready: pg_sys::Oid,
    // jobq.live_jobs
    id: usize,
    queue: usize,
    kind: usize,
    payload: usize,
    priority: usize,
    run_at: usize,
    enqueued_at: usize,
    state: usize,
    attempt: usize,
    max_attempts: usize,
    unique_key: usize,
    unique_strategy: usize,
    concurrency_key: usize,
    concurrency_limit: usize,
    rate_key: usize,
    checkpoints: usize,
    /// None in 0.4's tables, whose SQL takes no fairness key.
    fairness_key: Option<usize>,
    // jobq.ready
    r_queue: usize,
    r_priority: usize,
    r_run_at: usize,
    r_id: usize,
    r_kind: usize,
    r_keyed: usize,
    r_ckey: usize,
    r_climit: usize,
    r_while: usize,
    r_rate: usize,
    r_queue_hash: usize,
    r_fairness_key: Option<usize>,
}

thread_local! {
    static COLUMNS: Cell<Option<Columns>> = const { Cell::new(None) };
}

/// One enqueue's arguments, checked: what the fast path writes.
struct Job {
    args: [Option<pg_sys::Datum>; ARGS],
    queue: String,
    priority: i32,
    run_at: i64,
    now: i64,
    /// The unique key is taken before the rows are written (not for `while_executing`).
    takes_key: bool,
    /// Needs a slot, a rate start or a key handed over to start (jobq.ready's `keyed`).
    keyed: bool,
    /// The unique key, when its strategy is `while_executing`.
    while_key: Option<pg_sys::Datum>,
}

#[no_mangle]
pub extern "C" fn pg_finfo_jobq_enqueue() -> &'static pg_sys::Pg_finfo_record {
    const V1: pg_sys::Pg_finfo_record = pg_sys::Pg_finfo_record { api_version: 1 };
    &V1
}

/// `jobq_enqueue(queue, payload, kind, priority, run_at, max_attempts, unique_key,
/// unique_strategy, on_conflict, concurrency_key, concurrency_limit, rate_key, depends_on,
/// on_parent_failure, fairness_key)` (declared in
/// src/sql/enqueue.sql: `SECURITY DEFINER`, its search_path pinned, like every jobq_* function).
#[no_mangle]
#[pg_guard]
pub unsafe extern "C-unwind" fn jobq_enqueue(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum {
    // An older release's SQL declares fourteen arguments (no fairness key).
    let nargs = (*fcinfo).nargs as usize;
    let args: [Option<pg_sys::Datum>; ARGS] = std::array::from_fn(|n| {
        (n < nargs && !pgrx::fcinfo::pg_arg_is_null(fcinfo, n)).then(|| pgrx::fcinfo::pg_getarg_datum_raw(fcinfo, n))
    });
    let id = match common(&args) {
        Some(job) => fast(&job),
        None => every_case(&args),
    };
    match id {
        Some(id) => pg_sys::Datum::from(id),
        None => pgrx::fcinfo::pg_return_null(fcinfo),
    }
}

/// The SQL that serves every case (with the fairness key only when there is one).
unsafe fn every_case(args: &[Option<pg_sys::Datum>; ARGS]) -> Option<i64> {
    if args[FAIRNESS_KEY].is_some() {
        sql(FAIR_CASE, args, None)
    } else {
        sql(EVERY_CASE, &args[..FAIRNESS_KEY], None)
    }
}

/// `query` through a kept plan with `args` as `$1`... (and `id` after them, when given).
unsafe fn sql(query: &'static str, args: &[Option<pg_sys::Datum>], id: Option<i64>) -> Option<i64> {
    let mut types = TYPES[..args.len()].to_vec();
    let mut values: Vec<DatumWithOid> = args
        .iter()
        .zip(TYPES)
        .map(|(a, oid)| match a {
            Some(d) => DatumWithOid::new(*d, oid),
            None => DatumWithOid::null_oid(oid),
        })
        .collect();
    if let Some(id) = id {
        types.push(pg_sys::INT8OID);
        values.push(DatumWithOid::new(pg_sys::Datum::from(id), pg_sys::INT8OID));
    }
    kept::<i64>(query, &types, &values)
}

/// The arguments, when they make a common enqueue (module comment); None sends the call to the
/// SQL, which raises what it must.
unsafe fn common(args: &[Option<pg_sys::Datum>; ARGS]) -> Option<Job> {
    if pg_sys::XactIsoLevel >= pg_sys::XACT_REPEATABLE_READ as i32 || pg_sys::XactReadOnly {
        return None;
    }
    let name = |n: usize| args[n].map(|d| text(d));
    let fits = |s: Option<&[u8]>| s.is_none_or(|s| !s.is_empty() && s.len() <= 1000);
    // NULLs where the SQL's defaults are, or refused.
    let queue = name(QUEUE)?;
    // A limited role enqueues here into a queue it holds as a producer; otherwise the SQL
    // refuses it (src/grants.rs).
    let snapshot = if pg_sys::ActiveSnapshotSet() { pg_sys::GetActiveSnapshot() } else { pg_sys::GetTransactionSnapshot() };
    if crate::grants::limits(snapshot, b"producer").is_some_and(|p| !crate::grants::covers(&p, queue)) {
        return None;
    }
    let (priority, max_attempts, climit) = (args[PRIORITY]?, args[MAX_ATTEMPTS]?, args[CONCURRENCY_LIMIT]?);
    args[PAYLOAD]?;
    let (strategy, on_conflict) = (name(UNIQUE_STRATEGY)?, name(ON_CONFLICT)?);
    // A job with dependencies is the SQL's (src/sql/workflows.sql), as is a policy it refuses.
    if args[DEPENDS_ON].is_some() || !matches!(name(ON_PARENT_FAILURE)?, b"cancel" | b"run") {
        return None;
    }
    let (unique_key, ckey, rate_key) = (name(UNIQUE_KEY), name(CONCURRENCY_KEY), name(RATE_KEY));
    if !fits(Some(queue)) || !fits(unique_key) || !fits(ckey) || !fits(rate_key) || !fits(name(FAIRNESS_KEY)) || name(KIND).is_some_and(|k| k.len() > 1000) {
        return None;
    }
    let (priority, max_attempts, climit) = (priority.value() as i32, max_attempts.value() as i32, climit.value() as i32);
    if max_attempts < 1 || !(1..=10000).contains(&climit) {
        return None;
    }
    if !matches!(strategy, b"until_executed" | b"until_executing" | b"while_executing")
        || !matches!(on_conflict, b"reject" | b"discard" | b"log" | b"replace")
    {
        return None;
    }
    let now = pg_sys::GetCurrentTimestamp();
    let run_at = args[RUN_AT].map_or(now, |d| d.value() as i64);
    if run_at == i64::MIN || run_at == i64::MAX {
        return None; // -infinity, infinity
    }
    let queue = String::from_utf8(queue.to_vec()).ok()?;
    let while_executing = strategy == b"while_executing";
    Some(Job {
        args: *args,
        queue,
        priority,
        run_at,
        now,
        takes_key: unique_key.is_some() && !while_executing,
        keyed: ckey.is_some() || rate_key.is_some() || (unique_key.is_some() && strategy != b"until_executed"),
        while_key: if while_executing { args[UNIQUE_KEY] } else { None },
    })
}

/// The common enqueue: the job's id, or what the SQL returns when a unique key could not be
/// taken here (module comment).
unsafe fn fast(job: &Job) -> Option<i64> {
    let nsp = crate::relids::schema(false);
    let relid = |name: &'static CStr| crate::relids::relation(nsp, name);
    let (ready_id, live_id, seq_id) = (relid(c"ready"), relid(c"live_jobs"), relid(c"jobs_id_seq"));
    if [ready_id, live_id, seq_id].contains(&pg_sys::InvalidOid) {
        return every_case(&job.args);
    }
    // nextval(regclass) itself (its permission check passes: this runs as the tables' owner).
    let id = pg_sys::DirectFunctionCall1Coll(Some(sql_fn::nextval_oid), pg_sys::InvalidOid, pg_sys::Datum::from(seq_id)).value() as i64;
    if job.takes_key {
        // Before any table of the job is locked, as the SQL takes it: a taker of the same key
        // waits here for the first one's outcome holding nothing a compaction needs. A key
        // held (by a job, a live worker, or a stale lock jobq._take_key would remove first),
        // or a jobq.locks not as expected, is the SQL's, which resolves a conflict as
        // on_conflict says (with an id of its own).
        let locks = relid(c"locks");
        if locks == pg_sys::InvalidOid || take_key(locks, job.args[UNIQUE_KEY].unwrap(), id, job.now) != Some(true) {
            return every_case(&job.args);
        }
    }
    // The hot tables in their one lock order, jobq.ready first (as checkout and the compaction
    // take them).
    pg_sys::LockRelationOid(ready_id, pg_sys::RowExclusiveLock as pg_sys::LOCKMODE);
    let ready = pg_sys::table_open(ready_id, pg_sys::RowExclusiveLock as i32);
    let live = pg_sys::table_open(live_id, pg_sys::RowExclusiveLock as i32);
    let cols = if (*live).trigdesc.is_null() && (*ready).trigdesc.is_null() { columns(live, ready) } else { None };
    let cols = cols.filter(|c| job.args[FAIRNESS_KEY].is_none() || c.fairness_key.is_some() && c.r_fairness_key.is_some());
    if let Some(cols) = cols {
        // As a statement of a volatile function would: see what this transaction did so far.
        pg_sys::CommandCounterIncrement();
        write(live, ready, &cols, job, id);
        pg_sys::CommandCounterIncrement();
    }
    // The locks stay until the end of the transaction, as the executor's do.
    pg_sys::table_close(live, pg_sys::NoLock as i32);
    pg_sys::table_close(ready, pg_sys::NoLock as i32);
    if cols.is_none() {
        // Tables that are not the expected ones: the SQL's own insert, with this id (and the
        // fairness key only when there is one, as every_case passes it).
        return if job.args[FAIRNESS_KEY].is_some() {
            sql(FAIR_INSERT, &job.args, Some(id))
        } else {
            sql(INSERT, &job.args[..FAIRNESS_KEY], Some(id))
        };
    }
    // What jobq._insert_job does after its rows: the claim floors and the waiting checkouts,
    // at commit (src/floors.rs, src/waits.rs); a fairness key's turns, by the SQL's own
    // jobq._fair_keys (src/sql/fairness.sql); the dashboard's counter; the listeners.
    crate::floors::lower(ready_id, &job.queue, (job.priority, job.run_at, id));
    crate::waits::wake_at_commit(Some(job.queue.as_bytes()), job.run_at, 1);
    if let Some(key) = job.args[FAIRNESS_KEY] {
        // Its rows looked for here, as jobq._fair_keys looks; the SQL inserts what is missing.
        if !crate::fairness::has_turns(nsp, job.args[QUEUE].unwrap(), job.priority, key) {
            let args = [QUEUE, PRIORITY, FAIRNESS_KEY].map(|n| DatumWithOid::new(job.args[n].unwrap(), TYPES[n]));
            kept::<bool>("SELECT jobq._fair_keys($1, $2, ARRAY[$3]) IS NULL", &[TYPES[QUEUE], TYPES[PRIORITY], TYPES[FAIRNESS_KEY]], &args);
        }
    }
    if let Ok(at) = TimestampWithTimeZone::try_from(job.now) {
        tally(&job.queue, "enqueued", None, at);
    }
    if job.run_at <= job.now {
        crate::wakes::notify(&job.queue);
    }
    Some(id)
}

/// Takes unique key `key` for job `id` in `jobq.locks` (`locks`), as jobq._take_key's `INSERT ...
/// ON CONFLICT DO NOTHING` does: Some(false) when a row holds it; None, having done nothing, when
/// the table is not the expected one (triggers, other columns).
unsafe fn take_key(locks: pg_sys::Oid, key: pg_sys::Datum, id: i64, now: i64) -> Option<bool> {
    use pg_sys::{INT8OID, TEXTOID, TIMESTAMPTZOID, UUIDOID};
    let rel = pg_sys::table_open(locks, pg_sys::RowExclusiveLock as i32);
    let desc = (*rel).rd_att;
    let cols = [("key", TEXTOID), ("worker_id", UUIDOID), ("job_id", INT8OID), ("acquired_at", TIMESTAMPTZOID), ("expires_at", TIMESTAMPTZOID)];
    let expected = (*rel).trigdesc.is_null() && only_columns(desc, &cols);
    let at = |name: &str| column(desc, name);
    let taken = match (expected, at("key"), at("job_id"), at("acquired_at")) {
        (true, Some(k), Some(j), Some(a)) => {
            let mut row = NewRow::of(rel);
            row.set(k, Some(key));
            row.set(j, Some(pg_sys::Datum::from(id)));
            row.set(a, Some(pg_sys::Datum::from(now)));
            pg_sys::CommandCounterIncrement();
            let tuple = row.form(rel);
            let entries = IndexEntries::open_speculative(rel);
            let taken = entries.insert_unless_conflict(rel, tuple, pg_sys::GetCurrentCommandId(true));
            entries.close();
            Some(taken)
        }
        _ => None,
    };
    pg_sys::table_close(rel, pg_sys::NoLock as i32);
    taken
}

/// The job row and its ready row, as jobq._insert_job writes them.
unsafe fn write(live: pg_sys::Relation, ready: pg_sys::Relation, c: &Columns, job: &Job, id: i64) {
    let cid = pg_sys::GetCurrentCommandId(true);
    let a = &job.args;
    let mut row = NewRow::of(live);
    row.set(c.id, Some(pg_sys::Datum::from(id)));
    row.set(c.queue, a[QUEUE]);
    row.set(c.kind, a[KIND]);
    row.set(c.payload, a[PAYLOAD]);
    row.set(c.priority, a[PRIORITY]);
    row.set(c.run_at, Some(pg_sys::Datum::from(job.run_at)));
    row.set(c.enqueued_at, Some(pg_sys::Datum::from(job.now)));
    row.set(c.state, Some(pg_sys::Datum::from(pg_sys::cstring_to_text(c"ready".as_ptr()))));
    row.set(c.attempt, Some(pg_sys::Datum::from(0i32)));
    row.set(c.max_attempts, a[MAX_ATTEMPTS]);
    row.set(c.unique_key, a[UNIQUE_KEY]);
    row.set(c.unique_strategy, a[UNIQUE_KEY].and(a[UNIQUE_STRATEGY]));
    row.set(c.concurrency_key, a[CONCURRENCY_KEY]);
    row.set(c.concurrency_limit, a[CONCURRENCY_KEY].and(a[CONCURRENCY_LIMIT]));
    row.set(c.rate_key, a[RATE_KEY]);
    row.set(c.checkpoints, Some(empty_object()));
    if let Some(f) = c.fairness_key {
        row.set(f, a[FAIRNESS_KEY]);
    }
    insert(live, row.form(live), cid);

    let mut row = NewRow::of(ready);
    row.set(c.r_queue, a[QUEUE]);
    row.set(c.r_priority, a[PRIORITY]);
    row.set(c.r_run_at, Some(pg_sys::Datum::from(job.run_at)));
    row.set(c.r_id, Some(pg_sys::Datum::from(id)));
    row.set(c.r_kind, a[KIND]);
    row.set(c.r_keyed, Some(pg_sys::Datum::from(job.keyed)));
    row.set(c.r_ckey, a[CONCURRENCY_KEY]);
    row.set(c.r_climit, a[CONCURRENCY_KEY].and(a[CONCURRENCY_LIMIT]));
    row.set(c.r_while, job.while_key);
    row.set(c.r_rate, a[RATE_KEY]);
    row.set(c.r_queue_hash, Some(hashtext(a[QUEUE].unwrap()))); // the generated column
    if let Some(f) = c.r_fairness_key {
        row.set(f, a[FAIRNESS_KEY]); // in ready_fair, not ready_by_queue (partial indexes)
    }
    insert(ready, row.form(ready), cid);
}

/// The columns, once per backend and pair of tables; None when the tables have columns not
/// named here, or lack one (then the SQL, which names them, serves).
unsafe fn columns(live: pg_sys::Relation, ready: pg_sys::Relation) -> Option<Columns> {
    if let Some(c) = COLUMNS.get().filter(|c| c.rel == (*live).rd_id && c.ready == (*ready).rd_id) {
        return Some(c);
    }
    use pg_sys::{BOOLOID as B, INT4OID as I, INT8ARRAYOID as LA, INT8OID as L, JSONBOID as J, TEXTOID as T, TIMESTAMPTZOID as TS, UUIDOID as U};
    const LIVE: [(&str, pg_sys::Oid); 27] = [
        ("id", L), ("queue", T), ("kind", T), ("payload", J), ("priority", I), ("run_at", TS), ("enqueued_at", TS),
        ("state", T), ("attempt", I), ("max_attempts", I), ("unique_key", T), ("unique_strategy", T),
        ("concurrency_key", T), ("concurrency_limit", I), ("worker_id", U), ("started_at", TS), ("finished_at", TS),
        ("interrupted_at", TS), ("cancel_requested_at", TS), ("concurrency_slot", I), ("last_error", J), ("result", J),
        ("rate_key", T), ("errors", J), ("depends_on", LA), ("checkpoints", J), ("fairness_key", T),
    ];
    const READY: [(&str, pg_sys::Oid); 12] = [
        ("queue", T), ("priority", I), ("run_at", TS), ("id", L), ("kind", T), ("keyed", B), ("concurrency_key", T),
        ("concurrency_limit", I), ("while_key", T), ("rate_key", T), ("queue_hash", I), ("fairness_key", T),
    ];
    // Every column is one of these, of its type (a dropped one is left NULL, as the executor
    // leaves it), so that no column has a default or a type the fast path would not write.
    let (l, r) = ((*live).rd_att, (*ready).rd_att);
    if !only_columns(l, &LIVE) || !only_columns(r, &READY) {
        return None;
    }
    let c = Columns {
        rel: (*live).rd_id,
        ready: (*ready).rd_id,
        id: column(l, "id")?,
        queue: column(l, "queue")?,
        kind: column(l, "kind")?,
        payload: column(l, "payload")?,
        priority: column(l, "priority")?,
        run_at: column(l, "run_at")?,
        enqueued_at: column(l, "enqueued_at")?,
        state: column(l, "state")?,
        attempt: column(l, "attempt")?,
        max_attempts: column(l, "max_attempts")?,
        unique_key: column(l, "unique_key")?,
        unique_strategy: column(l, "unique_strategy")?,
        concurrency_key: column(l, "concurrency_key")?,
        concurrency_limit: column(l, "concurrency_limit")?,
        rate_key: column(l, "rate_key")?,
        checkpoints: column(l, "checkpoints")?,
        fairness_key: column(l, "fairness_key"),
        r_queue: column(r, "queue")?,
        r_priority: column(r, "priority")?,
        r_run_at: column(r, "run_at")?,
        r_id: column(r, "id")?,
        r_kind: column(r, "kind")?,
        r_keyed: column(r, "keyed")?,
        r_ckey: column(r, "concurrency_key")?,
        r_climit: column(r, "concurrency_limit")?,
        r_while: column(r, "while_key")?,
        r_rate: column(r, "rate_key")?,
        r_queue_hash: column(r, "queue_hash")?,
        r_fairness_key: column(r, "fairness_key"),
    };
    COLUMNS.set(Some(c));
    Some(c)
}

/// `'{}'::jsonb`, the checkpoints of a new job (the column's default, which this path writes
/// itself).
unsafe fn empty_object() -> pg_sys::Datum {
    pg_sys::DirectFunctionCall1Coll(Some(sql_fn::jsonb_in), pg_sys::InvalidOid, pg_sys::Datum::from(c"{}".as_ptr()))
}
