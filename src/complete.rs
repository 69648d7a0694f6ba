//! `jobq_complete`, the end of a job's hot path, without a plan.
//!
//! Counted with bench/instructions.sh, the PL/pgSQL completion (`jobq._complete`,
//! src/sql/finish.sql) spends most of its instructions on starting and ending its statements'
//! plans and on the function layer, not on the rows it moves (docs/performance.md, CPU per
//! job). So the common completion is done here against the table and index access methods:
//! the job row found by primary key, its fence checked (executing under `worker`, a worker
//! the caller may act for), the row deleted from `jobq.live_jobs` with `heap_delete` and its
//! copy, `completed`, inserted into `jobq.finished_jobs` with its index entries; the
//! dashboard's counter noted; a job with a unique or concurrency key has them released by
//! `jobq._release_keys`, as the SQL does. The same rows, the same WAL, the same locks as the SQL.
//!
//! Everything else goes to `jobq._complete`, the SQL that serves every case, before anything
//! was changed here: a NULL argument, a REPEATABLE READ or SERIALIZABLE transaction (whose
//! serialization rules the executor applies), a read-only transaction (refused there), a job not found or not executing under this
//! worker (false, or 42501 for a worker of another role), a job row that changed since this
//! call's snapshot (the SQL looks at its newest version, as READ COMMITTED does), and tables
//! that carry triggers or whose columns no longer match. Both SQL calls are prepared once per
//! backend (src/kept.rs). The fast path and the SQL are two copies of one
//! operation; the copy is the price of speed and its saving is measured (docs/internals.md).
use crate::counters::jobq::tally;
use crate::liveness::usable;
use crate::rows::{fetch, insert, text, tupdesc_attr};
use pgrx::datum::DatumWithOid;
use pgrx::pg_sys;
use pgrx::prelude::*;
use crate::kept::kept;
use crate::slots::Slots;
use crate::waits::{freed_at_commit, key_hash};
use std::cell::Cell;
use std::ffi::CStr;

/// Where the columns the fast path reads or writes are, in `jobq.live_jobs` (and the same in
/// `jobq.finished_jobs`), 0-based; found once per backend and table (`rel`).
#[derive(Copy, Clone)]
struct Columns {
    rel: pg_sys::Oid,
    id: usize,
    queue: usize,
    state: usize,
    unique_key: usize,
    unique_strategy: usize,
    concurrency_key: usize,
    concurrency_slot: usize,
    worker_id: usize,
    started_at: usize,
    finished_at: usize,
    result: usize,
}

thread_local! {
    static COLUMNS: Cell<Option<Columns>> = const { Cell::new(None) };
}

#[no_mangle]
pub extern "C" fn pg_finfo_jobq_complete() -> &'static pg_sys::Pg_finfo_record {
    const V1: pg_sys::Pg_finfo_record = pg_sys::Pg_finfo_record { api_version: 1 };
    &V1
}

/// `jobq_complete(job_id bigint, worker uuid, result jsonb)` (declared in src/sql/finish.sql:
/// `SECURITY DEFINER`, its search_path pinned, like every jobq_* function).
#[no_mangle]
#[pg_guard]
pub unsafe extern "C-unwind" fn jobq_complete(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum {
    let done = if pgrx::fcinfo::pg_arg_is_null(fcinfo, 0) || pgrx::fcinfo::pg_arg_is_null(fcinfo, 1) {
        None
    } else {
        let result = if pgrx::fcinfo::pg_arg_is_null(fcinfo, 2) {
            None
        } else {
            Some(pgrx::fcinfo::pg_getarg_datum_raw(fcinfo, 2))
        };
        let worker = pgrx::fcinfo::pg_getarg_datum_raw(fcinfo, 1);
        fast(pgrx::fcinfo::pg_getarg_datum_raw(fcinfo, 0).value() as i64, worker, result)
    };
    match done {
        Some(()) => true.into_datum().unwrap(),
        None => match sql(fcinfo) {
            Some(b) => b.into_datum().unwrap(),
            None => pgrx::fcinfo::pg_return_null(fcinfo),
        },
    }
}

#[no_mangle]
pub extern "C" fn pg_finfo_jobq_complete_and_checkout() -> &'static pg_sys::Pg_finfo_record {
    const V1: pg_sys::Pg_finfo_record = pg_sys::Pg_finfo_record { api_version: 1 };
    &V1
}

/// `jobq_complete_and_checkout(worker uuid, job_ids bigint[], results jsonb[], queues text[],
/// max_jobs integer)` (declared in src/sql/finish.sql), the workers' one-commit call. With one
/// job in hand, its common call: that job completed by [`jobq_complete`] and the next ones
/// checked out by `jobq_checkout` (src/checkout.rs), both called here as the C functions they
/// are, the checkout's rows put in this call's result; a job no longer in hand goes to
/// `jobq._refuse_fenced`, which raises JQ001 or JQ002. Through a PL/pgSQL function that called
/// both and returned the checkout's rows as its own, the call cost a job 415,658 instructions,
/// 6 % more than the two calls it stands for; here 330,352, 16 % less (bench/instructions.sh,
/// rows jobq_worker and jobq). Every other call (a batch in hand, none, bad input) is
/// `jobq._complete_and_checkout`'s.
///
/// Not `#[pg_guard]`, as `jobq_checkout`: the SQL called from this frame raises codes pgrx does
/// not know (JQ001, JQ002), which must reach the client as raised.
#[no_mangle]
pub unsafe extern "C-unwind" fn jobq_complete_and_checkout(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum {
    // (A view of the call's own arguments: nothing in this frame owns memory an error would
    // leave behind.)
    let args = (*fcinfo).args.as_slice(5);
    let null = pg_sys::NullableDatum { value: pg_sys::Datum::from(0usize), isnull: true };
    let in_hand = one_in_hand(fcinfo);
    if !in_hand.found {
        let sql = all_of_the_sql(fcinfo);
        let call = (*(*sql).flinfo).fn_addr.expect("jobq: jobq._complete_and_checkout has no address");
        call(sql);
        crate::checkout::append_rows(fcinfo, sql);
        return pg_sys::Datum::from(0usize);
    }
    let complete = crate::checkout::call_info(std::ptr::null_mut(), std::ptr::null_mut(), &[in_hand.job, args[0], in_hand.result]);
    let done = jobq_complete(complete);
    if (*complete).isnull || !bool::from_datum(done, false).unwrap_or(false) {
        let refuse = refusal(args[0], args[1]);
        let call = (*(*refuse).flinfo).fn_addr.expect("jobq: jobq._refuse_fenced has no address");
        call(refuse);
    }
    // jobq_checkout(worker, queues, max_jobs, NULL), its rows in this call's result (its
    // function info is this call's: the result type is the same, jobq.job).
    let checkout = crate::checkout::call_info((*fcinfo).flinfo, (*fcinfo).resultinfo, &[args[0], args[3], args[4], null]);
    crate::checkout::jobq_checkout(checkout)
}

/// The one job in hand of a call of `jobq_complete_and_checkout` and its result (`found`
/// false: the call has not one).
#[repr(C)]
struct InHand {
    found: bool,
    job: pg_sys::NullableDatum,
    result: pg_sys::NullableDatum,
}

/// The job in hand when the call has one, with its result: a worker, `job_ids` of one
/// dimension and one id, and `results` NULL or of one dimension and one element.
#[pg_guard]
unsafe extern "C-unwind" fn one_in_hand(fcinfo: pg_sys::FunctionCallInfo) -> InHand {
    let null = pg_sys::NullableDatum { value: pg_sys::Datum::from(0usize), isnull: true };
    let none = InHand { found: false, job: null, result: null };
    let only = |n: usize, typ: pg_sys::Oid, len: i16, byval: bool, align: u8| -> Option<pg_sys::NullableDatum> {
        let a = pg_sys::pg_detoast_datum(pgrx::fcinfo::pg_getarg_datum_raw(fcinfo, n).cast_mut_ptr()) as *mut pg_sys::ArrayType;
        if (*a).ndim != 1 {
            return None;
        }
        let (mut elems, mut nulls, mut count) = (std::ptr::null_mut(), std::ptr::null_mut(), 0);
        pg_sys::deconstruct_array(a, typ, len as i32, byval, align as _, &mut elems, &mut nulls, &mut count);
        (count == 1).then(|| pg_sys::NullableDatum { value: *elems, isnull: *nulls })
    };
    if pgrx::fcinfo::pg_arg_is_null(fcinfo, 0) || pgrx::fcinfo::pg_arg_is_null(fcinfo, 1) {
        return none;
    }
    let Some(job) = only(1, pg_sys::INT8OID, 8, true, pg_sys::TYPALIGN_DOUBLE).filter(|job| !job.isnull) else {
        return none;
    };
    let result = if pgrx::fcinfo::pg_arg_is_null(fcinfo, 2) { Some(null) } else { only(2, pg_sys::JSONBOID, -1, false, pg_sys::TYPALIGN_INT) };
    match result {
        Some(result) => InHand { found: true, job, result },
        None => none,
    }
}

/// The call of `jobq._complete_and_checkout` with this call's arguments, prepared, this call's
/// result set up.
#[pg_guard]
unsafe extern "C-unwind" fn all_of_the_sql(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::FunctionCallInfo {
    pg_sys::InitMaterializedSRF(fcinfo, 0);
    let rsinfo = (*fcinfo).resultinfo as *mut pg_sys::ReturnSetInfo;
    crate::checkout::sql_call(rsinfo, c"jobq._complete_and_checkout(uuid, bigint[], jsonb[], text[], integer)", (*fcinfo).args.as_slice(5))
}

/// The call of `jobq._refuse_fenced(worker, job_ids, '{}')`, prepared: the job in hand was not
/// completed.
#[pg_guard]
unsafe extern "C-unwind" fn refusal(worker: pg_sys::NullableDatum, job_ids: pg_sys::NullableDatum) -> pg_sys::FunctionCallInfo {
    let flinfo = crate::checkout::function(c"jobq._refuse_fenced(uuid, bigint[], bigint[])");
    let none = pg_sys::construct_empty_array(pg_sys::INT8OID);
    let kept = pg_sys::NullableDatum { value: pg_sys::Datum::from(none), isnull: false };
    crate::checkout::call_info(flinfo, std::ptr::null_mut(), &[worker, job_ids, kept])
}

/// The SQL that serves every case.
unsafe fn sql(fcinfo: pg_sys::FunctionCallInfo) -> Option<bool> {
    let arg = |n: usize, oid: pg_sys::Oid| {
        if pgrx::fcinfo::pg_arg_is_null(fcinfo, n) {
            DatumWithOid::null_oid(oid)
        } else {
            DatumWithOid::new(pgrx::fcinfo::pg_getarg_datum_raw(fcinfo, n), oid)
        }
    };
    kept(
        "SELECT jobq._complete($1, $2, $3)",
        &[pg_sys::INT8OID, pg_sys::UUIDOID, pg_sys::JSONBOID],
        &[arg(0, pg_sys::INT8OID), arg(1, pg_sys::UUIDOID), arg(2, pg_sys::JSONBOID)],
    )
}

/// The common completion; None, having changed nothing, when it is not one (module comment).
unsafe fn fast(job: i64, worker: pg_sys::Datum, result: Option<pg_sys::Datum>) -> Option<()> {
    // The executor's rules the fast path does not re-implement: serialization (REPEATABLE READ,
    // SERIALIZABLE) and a read-only transaction (25006 from the SQL; a standby is read-only).
    if pg_sys::XactIsoLevel >= pg_sys::XACT_REPEATABLE_READ as i32 || pg_sys::XactReadOnly {
        return None;
    }
    let nsp = crate::relids::schema(false);
    let relid = |name: &'static CStr| crate::relids::relation(nsp, name);
    let (ready_id, live_id, finished_id, workers_id) =
        (relid(c"ready"), relid(c"live_jobs"), relid(c"finished_jobs"), relid(c"workers"));
    if [ready_id, live_id, finished_id, workers_id].contains(&pg_sys::InvalidOid) {
        return None;
    }
    // The hot tables in their one lock order, jobq.ready first (as checkout and the compaction
    // take them), though a completion does not read it: a transaction that completes and then
    // checks out (jobq_complete_and_checkout) would otherwise hold jobq.live_jobs while it
    // waits for jobq.ready, and a compaction holding ready would never get live_jobs.
    pg_sys::LockRelationOid(ready_id, pg_sys::AccessShareLock as pg_sys::LOCKMODE);
    let live = pg_sys::table_open(live_id, pg_sys::RowExclusiveLock as i32);
    let finished = pg_sys::table_open(finished_id, pg_sys::RowExclusiveLock as i32);
    let workers = pg_sys::table_open(workers_id, pg_sys::AccessShareLock as i32);
    // As a statement of a volatile function would: see what this transaction did so far, in
    // a new snapshot (READ COMMITTED), taken once the tables are locked: a compaction of
    // jobq.live_jobs (src/compact.rs) the lock waited for is in it.
    pg_sys::CommandCounterIncrement();
    pg_sys::PushActiveSnapshot(pg_sys::GetTransactionSnapshot());
    let done = claim_end(live, finished, workers, job, worker, result);
    // The locks stay until the end of the transaction, as the executor's do.
    pg_sys::table_close(workers, pg_sys::NoLock as i32);
    pg_sys::table_close(finished, pg_sys::NoLock as i32);
    pg_sys::table_close(live, pg_sys::NoLock as i32);
    pg_sys::PopActiveSnapshot();
    if done.is_some() {
        pg_sys::CommandCounterIncrement();
        if crate::edges::awaited(nsp, job) {
            kept::<bool>(
                "SELECT jobq._settle(ARRAY[$1], ARRAY['completed']) IS NULL",
                &[pg_sys::INT8OID],
                &[DatumWithOid::new(pg_sys::Datum::from(job), pg_sys::INT8OID)],
            );
        }
    }
    done
}

unsafe fn claim_end(
    live: pg_sys::Relation,
    finished: pg_sys::Relation,
    workers: pg_sys::Relation,
    job: i64,
    worker: pg_sys::Datum,
    result: Option<pg_sys::Datum>,
) -> Option<()> {
    if !(*live).trigdesc.is_null() || !(*finished).trigdesc.is_null() {
        return None;
    }
    let cols = columns(live, finished)?;
    let snapshot = pg_sys::GetActiveSnapshot();

    // The job row, by primary key, in this snapshot.
    let row = fetch(live, (cols.id + 1) as i16, pg_sys::F_INT8EQ, pg_sys::Datum::from(job), snapshot)?;
    let desc = (*live).rd_att;
    let natts = (*desc).natts as usize;
    let mut values = vec![pg_sys::Datum::from(0usize); natts];
    let mut nulls = vec![false; natts];
    pg_sys::heap_deform_tuple(row, desc, values.as_mut_ptr(), nulls.as_mut_ptr());
    // The fence: executing under this worker.
    if nulls[cols.state] || text(values[cols.state]) != b"executing" || nulls[cols.worker_id] {
        return None;
    }
    if !uuid_eq(values[cols.worker_id], worker) {
        return None;
    }
    // The worker exists and the caller may act for it (else the SQL says why: false or 42501).
    if usable(workers, worker, snapshot, false) != Some(true) {
        return None;
    }
    // A limited role's job of a queue it may not work on: the SQL refuses it (src/grants.rs).
    if crate::grants::limits(snapshot, b"worker").is_some_and(|p| !crate::grants::covers(&p, text(values[cols.queue]))) {
        return None;
    }

    // The delete, waiting for a transaction that holds the row as an UPDATE would. A row
    // changed since our snapshot: nothing was done, the SQL looks at its newest version.
    let mut tmfd: pg_sys::TM_FailureData = std::mem::zeroed();
    let cid = pg_sys::GetCurrentCommandId(true);
    let tid = &mut (*row).t_self as *mut pg_sys::ItemPointerData;
    let rc = pg_sys::heap_delete(live, tid, cid, std::ptr::null_mut(), true, &mut tmfd, false);
    if rc != pg_sys::TM_Result::TM_Ok {
        return None;
    }

    let finished_at = pg_sys::GetCurrentTimestamp();
    let queue = text(values[cols.queue]).to_vec();
    let started_at = (!nulls[cols.started_at]).then(|| values[cols.started_at].value() as i64);
    if crate::gucs::jobq::retention_ms() > 0 {
        values[cols.state] = pg_sys::Datum::from(pg_sys::cstring_to_text(c"completed".as_ptr()));
        values[cols.finished_at] = pg_sys::Datum::from(finished_at);
        nulls[cols.finished_at] = false;
        values[cols.result] = result.unwrap_or(pg_sys::Datum::from(0usize));
        nulls[cols.result] = result.is_none();
        insert(finished, pg_sys::heap_form_tuple((*finished).rd_att, values.as_mut_ptr(), nulls.as_mut_ptr()), cid);
    }
    let ts = |t: i64| TimestampWithTimeZone::try_from(t).ok();
    if let (Ok(queue), Some(at)) = (std::str::from_utf8(&queue), ts(finished_at)) {
        tally(queue, "completed", started_at.and_then(ts), at);
    }
    // Slots alone (a concurrency slot, a while_executing key's): given back here
    // (src/slots.rs), each noted for the waiting checkouts its key held back, of any queue
    // (src/waits.rs), as jobq._release_keys does. Other unique keys are released by it.
    let while_key = (!nulls[cols.unique_key] && !nulls[cols.unique_strategy] && text(values[cols.unique_strategy]) == b"while_executing")
        .then(|| text(values[cols.unique_key]));
    let slot = (!nulls[cols.concurrency_key] && !nulls[cols.concurrency_slot]).then(|| (text(values[cols.concurrency_key]), values[cols.concurrency_slot].value() as i32));
    if (nulls[cols.unique_key] || while_key.is_some()) && (while_key.is_some() || slot.is_some()) {
        if let Some(mut slots) = Slots::open() {
            if let Some((key, n)) = slot {
                if slots.release(b'c', key, n, job, snapshot) {
                    freed_at_commit(key_hash(b'c', key));
                }
            }
            if let Some(key) = while_key {
                if slots.release(b'u', key, 1, job, snapshot) {
                    freed_at_commit(key_hash(b'u', key));
                }
            }
            slots.close();
            return Some(());
        }
    }
    if !nulls[cols.unique_key] || !nulls[cols.concurrency_key] {
        let arg = |i: usize, oid: pg_sys::Oid| {
            if nulls[i] {
                DatumWithOid::null_oid(oid)
            } else {
                DatumWithOid::new(values[i], oid)
            }
        };
        let (txt, int) = (pg_sys::TEXTOID, pg_sys::INT4OID);
        kept::<bool>(
            "SELECT jobq._release_keys($1, $2, 'completed', $3, $4, $5, $6) IS NOT NULL",
            &[pg_sys::INT8OID, txt, txt, txt, txt, int],
            &[
                arg(cols.id, pg_sys::INT8OID),
                arg(cols.queue, txt),
                arg(cols.unique_key, txt),
                arg(cols.unique_strategy, txt),
                arg(cols.concurrency_key, txt),
                arg(cols.concurrency_slot, int),
            ],
        );
    }
    Some(())
}

/// The columns, once per backend and table; None when the two job tables' columns differ
/// (then the SQL, which names them, serves).
unsafe fn columns(live: pg_sys::Relation, finished: pg_sys::Relation) -> Option<Columns> {
    if let Some(c) = COLUMNS.get().filter(|c| c.rel == (*live).rd_id) {
        return Some(c);
    }
    let (a, b) = ((*live).rd_att, (*finished).rd_att);
    if (*a).natts != (*b).natts {
        return None;
    }
    for i in 0..(*a).natts as usize {
        let (x, y) = (tupdesc_attr(a, i), tupdesc_attr(b, i));
        if (*x).atttypid != (*y).atttypid || (*x).attisdropped || (*y).attisdropped {
            return None;
        }
    }
    let find = |desc: pg_sys::TupleDesc, name: &str| crate::rows::column(desc, name);
    let c = Columns {
        rel: (*live).rd_id,
        id: find(a, "id")?,
        queue: find(a, "queue")?,
        state: find(a, "state")?,
        unique_key: find(a, "unique_key")?,
        unique_strategy: find(a, "unique_strategy")?,
        concurrency_key: find(a, "concurrency_key")?,
        concurrency_slot: find(a, "concurrency_slot")?,
        worker_id: find(a, "worker_id")?,
        started_at: find(a, "started_at")?,
        finished_at: find(a, "finished_at")?,
        result: find(a, "result")?,
    };
    COLUMNS.set(Some(c));
    Some(c)
}

unsafe fn uuid_eq(a: pg_sys::Datum, b: pg_sys::Datum) -> bool {
    let (a, b) = (a.cast_mut_ptr::<u8>(), b.cast_mut_ptr::<u8>());
    std::slice::from_raw_parts(a, 16) == std::slice::from_raw_parts(b, 16)
}
