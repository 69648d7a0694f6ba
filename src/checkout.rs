//! `jobq_checkout`, the start of a job's hot path, without a plan.
//!
//! Counted with bench/instructions.sh, two thirds of a job's instructions were checkout's, most
//! of them the start-up and end of its one statement's plan (about 40 nodes), not the rows it
//! touches (docs/performance.md, "CPU per job"). So the common checkout is done here against the
//! table and index access methods, as src/complete.rs does for completion:
//!
//! - the worker judged by one lookup (src/liveness.rs), and the pauses (jobq.pauses, usually
//!   empty) read once: a waiting job of a paused queue or kind is passed over, as the SQL's
//!   condition passes it over;
//! - for one queue, `ready_by_queue` walked from the queue's claim floor (src/floors.rs) in
//!   claim order, with the scan keys the SQL's index condition has: `queue_hash =
//!   hashtext($1)`, `(priority, run_at, id) >= floor` (a row comparison) and `run_at <= now`,
//!   each row's queue tested (two queues may share a hash); for every queue (NULL) or several,
//!   `ready_any` from the floor of all queues with the last two, each row's queue tested
//!   against the names, as the SQL's statement for several queues does;
//! - each plain job's ready row deleted with `heap_delete` without waiting: a row another
//!   transaction holds is passed over, as `FOR UPDATE SKIP LOCKED` passes it over (a row this
//!   transaction holds is taken, as it takes it), and deleting it at once writes no lock record
//!   before the delete (the SQL locks, then deletes: one WAL record more per job);
//! - a keyed job's ready row (a concurrency key, a rate key, a `while_executing` or
//!   `until_executing` unique key) locked without waiting, then what the job needs to start
//!   taken: its slots (a concurrency key's, a `while_executing` key's) by src/slots.rs, a rate
//!   start or an `until_executing` key by `jobq._take_keys` (SQL, through a kept plan); the
//!   row then deleted; a job that cannot start stays locked and later jobs of its key are
//!   passed over for the rest of the call, exactly as the SQL's general path does;
//! - the job row marked executing with `heap_update` and the index entries the update needs
//!   (none when it is a HOT update), the counter noted, the row returned.
//!
//! `jobq_checkout` itself is this module's C function (src/sql/checkout.sql declares it); what
//! it does not serve goes to `jobq._checkout`, the SQL that serves every case. Left whole, before
//! anything was changed here: a NULL worker, a NULL or out-of-range `max_jobs`, `wait`, an
//! empty array of queues or a NULL name in it, REPEATABLE READ or SERIALIZABLE, a read-only
//! transaction, a worker that is not registered, alive and the caller's (the SQL says why:
//! JQ001, 42501), a checkout of several queues or of every queue in a database where some
//! queue takes fair turns (src/sql/fairness.sql), triggers on the tables, tables or an index
//! whose columns are not the ones named here. A checkout of one queue that takes turns is
//! claimed in its turns by src/fairness.rs, with this module's claim of each job
//! (`Claimer::try_row`). Left in part, when the walk meets a ready row changed since this call's snapshot (a
//! `replace` moved it; the SQL looks at its newest version, as READ COMMITTED does): the jobs
//! claimed here stay claimed, and the SQL looks for the others past them (they are this
//! transaction's deletes). The fast path and the SQL are two copies of one operation;
//! tests/checkout.rs checks that they agree, and the saving is measured (docs/internals.md).
use crate::counters::jobq::tally;
use crate::kept::kept;
use crate::liveness::usable;
use crate::rows::{attr, column, fetch, text, tupdesc_attr, IndexEntries};
use crate::slots::Slots;
use pgrx::datum::DatumWithOid;
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::cell::Cell;
use std::ffi::CStr;
use std::ptr::null_mut;

/// Where what the fast path reads and writes is; found once per backend and set of tables.
#[derive(Copy, Clone)]
pub(crate) struct Layout {
    pub(crate) ready: pg_sys::Oid,
    pub(crate) live: pg_sys::Oid,
    pub(crate) result: pg_sys::Oid,
    // jobq.ready, 1-based
    pub(crate) r_queue: i16,
    pub(crate) r_queue_hash: i16,
    pub(crate) r_priority: i16,
    pub(crate) r_run_at: i16,
    pub(crate) r_id: i16,
    pub(crate) r_kind: i32,
    pub(crate) r_keyed: i32,
    pub(crate) r_ckey: i32,
    pub(crate) r_climit: i32,
    pub(crate) r_while: i32,
    pub(crate) r_rate: i32,
    // jobq.live_jobs, 0-based
    pub(crate) id: usize,
    pub(crate) queue: usize,
    pub(crate) state: usize,
    pub(crate) attempt: usize,
    pub(crate) worker_id: usize,
    pub(crate) run_at: usize,
    pub(crate) started_at: usize,
    pub(crate) concurrency_slot: usize,
    pub(crate) unique_key: usize,
    pub(crate) unique_strategy: usize,
    pub(crate) concurrency_key: usize,
    pub(crate) concurrency_limit: usize,
    pub(crate) rate_key: usize,
    // the result's columns (jobq.job), as positions in jobq.live_jobs
    pub(crate) out: [u8; 32],
    pub(crate) n_out: usize,
}

thread_local! {
    static LAYOUT: Cell<Option<Layout>> = const { Cell::new(None) };
}

#[no_mangle]
pub extern "C" fn pg_finfo_jobq_checkout() -> &'static pg_sys::Pg_finfo_record {
    const V1: pg_sys::Pg_finfo_record = pg_sys::Pg_finfo_record { api_version: 1 };
    &V1
}

/// `jobq_checkout(worker uuid, queues text[], max_jobs integer, wait interval)` (declared in
/// src/sql/checkout.sql: `SECURITY DEFINER`, its search_path pinned). A set-returning function
/// in materialize mode: the jobs claimed here go to its tuplestore, then those `jobq._checkout`
/// claims when it has to run (module comment).
///
/// Not `#[pg_guard]`, and nothing here owns anything: `jobq._checkout` is called through the
/// function manager from this frame, outside any Rust code that catches errors, so that an
/// error it raises (JQ001 for a dead worker, 42501, 22023, a cancel) reaches the client as it
/// was raised. pgrx would turn the codes it does not know (JQ001) into XX000. The Rust work is
/// in the two guarded calls around it.
#[no_mangle]
pub unsafe extern "C-unwind" fn jobq_checkout(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum {
    let sql = checkout_common(fcinfo);
    if !sql.is_null() {
        let call = (*(*sql).flinfo).fn_addr.expect("jobq: jobq._checkout has no address");
        call(sql);
        append_rows(fcinfo, sql);
    }
    pg_sys::Datum::from(0usize)
}

/// The common checkout, into the result's tuplestore; then the call of `jobq._checkout` that
/// must follow, prepared (null when none must): the whole call when this was not a common
/// checkout (nothing was done), or the jobs still wanted when the walk met a ready row changed
/// since its snapshot.
#[pg_guard]
unsafe extern "C-unwind" fn checkout_common(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::FunctionCallInfo {
    pg_sys::InitMaterializedSRF(fcinfo, 0);
    let rsinfo = (*fcinfo).resultinfo as *mut pg_sys::ReturnSetInfo;
    let (store, desc) = ((*rsinfo).setResult, (*rsinfo).setDesc);
    let arg = |n: usize| (!pgrx::fcinfo::pg_arg_is_null(fcinfo, n)).then(|| pgrx::fcinfo::pg_getarg_datum_raw(fcinfo, n));
    let mut rest = None; // the SQL's max_jobs, wait: the whole call
    if let (Some(worker), queues, Some(max), None) = (arg(0), arg(1), arg(2).map(|d| d.value() as i32), arg(3)) {
        if (1..=10_000).contains(&max) {
            match which_queues(queues).and_then(|queues| fast(worker, &queues, max, store, desc)) {
                Some((n, true)) if n < max => rest = Some(max - n),
                Some(_) => return null_mut(),
                None => {}
            }
        }
    }
    // jobq._checkout(worker, queues, max_jobs, wait), with this call's arguments or, for the
    // rest, (worker, queues, the jobs still wanted, NULL).
    let mut args = (*fcinfo).args.as_slice(4).to_vec();
    if let Some(left) = rest {
        args[2] = pg_sys::NullableDatum { value: pg_sys::Datum::from(left), isnull: false };
        args[3] = pg_sys::NullableDatum { value: pg_sys::Datum::from(0usize), isnull: true };
    }
    sql_call(rsinfo, c"jobq._checkout(uuid, text[], integer, interval)", &args)
}

/// A call of the set-returning SQL function `signature` with `args`, prepared: in materialize
/// mode, with a ReturnSetInfo of its own in the context of `rsinfo` (this call's). To be called
/// from an unguarded frame (so that its errors keep their SQLSTATE), then its rows appended
/// ([`append_rows`]).
pub(crate) unsafe fn sql_call(rsinfo: *mut pg_sys::ReturnSetInfo, signature: &CStr, args: &[pg_sys::NullableDatum]) -> pg_sys::FunctionCallInfo {
    let sql_rsinfo = pg_sys::palloc0(std::mem::size_of::<pg_sys::ReturnSetInfo>()) as *mut pg_sys::ReturnSetInfo;
    (*sql_rsinfo).type_ = pg_sys::NodeTag::T_ReturnSetInfo;
    (*sql_rsinfo).econtext = (*rsinfo).econtext;
    (*sql_rsinfo).expectedDesc = (*rsinfo).expectedDesc;
    (*sql_rsinfo).allowedModes = pg_sys::SetFunctionReturnMode::SFRM_Materialize as i32;
    (*sql_rsinfo).returnMode = pg_sys::SetFunctionReturnMode::SFRM_ValuePerCall;
    call_info(function(signature), sql_rsinfo as *mut pg_sys::Node, args)
}

/// The function manager's information of the SQL function `signature` ("name(types)").
pub(crate) unsafe fn function(signature: &CStr) -> *mut pg_sys::FmgrInfo {
    let oid = pg_sys::DirectFunctionCall1Coll(Some(crate::rows::sql_fn::regprocedurein), pg_sys::InvalidOid, pg_sys::Datum::from(signature.as_ptr()));
    let flinfo = pg_sys::palloc0(std::mem::size_of::<pg_sys::FmgrInfo>()) as *mut pg_sys::FmgrInfo;
    pg_sys::fmgr_info(pg_sys::Oid::from(oid.value() as u32), flinfo);
    flinfo
}

/// A function call info of `args`, for the function of `flinfo` with result info `resultinfo`.
pub(crate) unsafe fn call_info(flinfo: *mut pg_sys::FmgrInfo, resultinfo: *mut pg_sys::Node, args: &[pg_sys::NullableDatum]) -> pg_sys::FunctionCallInfo {
    let size = std::mem::size_of::<pg_sys::FunctionCallInfoBaseData>() + std::mem::size_of_val(args);
    let call = pg_sys::palloc0(size) as pg_sys::FunctionCallInfo;
    (*call).flinfo = flinfo;
    (*call).resultinfo = resultinfo;
    (*call).nargs = args.len() as i16;
    (*call).args.as_mut_slice(args.len()).copy_from_slice(args);
    call
}

/// The rows the SQL call `sql` returned ([`sql_call`]), after those already in this call's
/// tuplestore.
#[pg_guard]
pub(crate) unsafe extern "C-unwind" fn append_rows(fcinfo: pg_sys::FunctionCallInfo, sql: pg_sys::FunctionCallInfo) {
    let (ours, theirs) = ((*fcinfo).resultinfo as *mut pg_sys::ReturnSetInfo, (*sql).resultinfo as *mut pg_sys::ReturnSetInfo);
    let got = (*theirs).setResult;
    if got.is_null() {
        return; // no rows
    }
    let slot = pg_sys::MakeSingleTupleTableSlot((*theirs).setDesc, &pg_sys::TTSOpsMinimalTuple);
    while pg_sys::tuplestore_gettupleslot(got, true, false, slot) {
        pg_sys::tuplestore_puttupleslot((*ours).setResult, slot);
    }
    pg_sys::ExecDropSingleTupleTableSlot(slot);
    pg_sys::tuplestore_end(got);
}

/// The queues a checkout asks for.
enum Queues {
    /// One queue: `ready_by_queue` walked from its floor.
    One(pg_sys::Datum),
    /// Every queue (`queues` NULL), or those named: `ready_any` walked from the floor of all
    /// queues, each row's queue tested, as the SQL's statement for several queues does.
    Any,
    Some(Vec<Vec<u8>>),
}

/// What `queues` asks for; None (the SQL serves) for an empty array, one of several
/// dimensions, or a NULL element.
unsafe fn which_queues(queues: Option<pg_sys::Datum>) -> Option<Queues> {
    let Some(queues) = queues else { return Some(Queues::Any) };
    let a = pg_sys::pg_detoast_datum(queues.cast_mut_ptr()) as *mut pg_sys::ArrayType;
    if (*a).ndim != 1 {
        return None;
    }
    let (mut elems, mut nulls, mut n) = (null_mut(), null_mut(), 0);
    pg_sys::deconstruct_array(a, pg_sys::TEXTOID, -1, false, pg_sys::TYPALIGN_INT as _, &mut elems, &mut nulls, &mut n);
    let n = n as usize;
    if n == 0 || (0..n).any(|i| *nulls.add(i)) {
        return None;
    }
    if n == 1 {
        return Some(Queues::One(*elems));
    }
    Some(Queues::Some((0..n).map(|i| text(*elems.add(i)).to_vec()).collect()))
}

pub(crate) struct Rels {
    ready: pg_sys::Relation,
    index: pg_sys::Relation,
    live: pg_sys::Relation,
    workers: pg_sys::Relation,
    pauses: pg_sys::Relation,
}

/// The common checkout: Some((jobs claimed, whether the SQL must look for the rest)); None,
/// having changed nothing, when it is not one (module comment).
unsafe fn fast(
    worker: pg_sys::Datum,
    queues: &Queues,
    max: i32,
    store: *mut pg_sys::Tuplestorestate,
    desc: pg_sys::TupleDesc,
) -> Option<(i32, bool)> {
    // The executor's rules the fast path does not re-implement: serialization (REPEATABLE READ,
    // SERIALIZABLE) and a read-only transaction (refused by the SQL; a standby is read-only).
    if pg_sys::XactIsoLevel >= pg_sys::XACT_REPEATABLE_READ as i32 || pg_sys::XactReadOnly {
        return None;
    }
    let nsp = crate::relids::schema(false);
    let relid = |name: &'static CStr| crate::relids::relation(nsp, name);
    let index = if let Queues::One(_) = queues { c"ready_by_queue" } else { c"ready_any" };
    let ids = [relid(c"ready"), relid(index), relid(c"live_jobs"), relid(c"workers"), relid(c"pauses")];
    if ids.contains(&pg_sys::InvalidOid) {
        return None;
    }
    let (row_ex, share) = (pg_sys::RowExclusiveLock as i32, pg_sys::AccessShareLock as i32);
    let r = Rels {
        ready: pg_sys::table_open(ids[0], row_ex),
        index: pg_sys::index_open(ids[1], share),
        live: pg_sys::table_open(ids[2], row_ex),
        workers: pg_sys::table_open(ids[3], share),
        pauses: pg_sys::table_open(ids[4], share),
    };
    // As a statement of a volatile function would: see what this transaction did so far, in
    // a new snapshot (READ COMMITTED), taken once the tables are locked: a compaction of
    // them (src/compact.rs) the locks waited for is in it.
    pg_sys::CommandCounterIncrement();
    let counts = crate::fairness::counts(); // before the snapshot (src/fairness.rs)
    pg_sys::PushActiveSnapshot(pg_sys::GetTransactionSnapshot());
    let got = claim(&r, worker, queues, max, store, desc, counts);
    // The locks stay until the end of the transaction, as the executor's do.
    let no = pg_sys::NoLock as i32;
    pg_sys::table_close(r.pauses, no);
    pg_sys::table_close(r.workers, no);
    pg_sys::table_close(r.live, no);
    pg_sys::index_close(r.index, no);
    pg_sys::table_close(r.ready, no);
    pg_sys::PopActiveSnapshot();
    if got.is_some_and(|(n, _)| n > 0) {
        pg_sys::CommandCounterIncrement();
    }
    got
}

unsafe fn claim(
    r: &Rels,
    worker: pg_sys::Datum,
    queues: &Queues,
    max: i32,
    store: *mut pg_sys::Tuplestorestate,
    desc: pg_sys::TupleDesc,
    counts: Option<crate::fairness::Counts>,
) -> Option<(i32, bool)> {
    if !(*r.ready).trigdesc.is_null() || !(*r.live).trigdesc.is_null() {
        return None;
    }
    let l = layout(r, desc)?;
    let snapshot = pg_sys::GetActiveSnapshot();
    if usable(r.workers, worker, snapshot, true) != Some(true) {
        return None;
    }
    // A limited role's checkout is done here only when it names queues it holds as a worker;
    // otherwise the SQL refuses it or keeps it to its queues (src/grants.rs).
    if let Some(p) = crate::grants::limits(snapshot, b"worker") {
        let inside = match queues {
            Queues::One(q) => crate::grants::covers(&p, text(*q)),
            Queues::Some(names) => names.iter().all(|n| crate::grants::covers(&p, n)),
            Queues::Any => false,
        };
        if !inside {
            return None;
        }
    }
    // A database where some queue takes turns: a checkout of one queue is done here, in its
    // turns when it is fair (src/fairness.rs); any other, by the SQL.
    let nsp = (*(*r.ready).rd_rel).relnamespace;
    let turns = match queues {
        // Whether the queue takes turns: one descent of fairness_by_key (src/fairness.rs).
        Queues::One(q) if crate::fairness::any(nsp, None) => crate::fairness::Turns::open(nsp, *q, r.ready, &l, snapshot, counts)?,
        Queues::One(_) => None,
        _ if crate::fairness::any(nsp, Some(snapshot)) => return None,
        _ => None,
    };
    let pauses = Pauses::read(r.pauses, snapshot)?;
    let mut c = Claimer {
        r,
        l,
        worker,
        now: pg_sys::GetCurrentTimestamp(),
        store,
        desc,
        pauses,
        writer: None,
        blocked: Blocked::default(),
        slots: None,
    };
    let got = match turns {
        Some(t) => {
            let got = crate::fairness::claim(&mut c, &t, max);
            t.close();
            Some(got)
        }
        None => walk(&mut c, queues, max, snapshot),
    };
    c.close();
    got
}

/// The plain walk of `queues` (the module comment): up to `max` jobs claimed, in claim order.
unsafe fn walk(c: &mut Claimer, queues: &Queues, max: i32, snapshot: pg_sys::Snapshot) -> Option<(i32, bool)> {
    let (r, l, now) = (c.r, c.l, c.now);
    // The walk, in claim order from the floor: for one queue, ready_by_queue (queue_hash,
    // priority, run_at, id) with queue_hash = hashtext($1) AND (priority, run_at, id) >= its
    // floor AND run_at <= now, each row's queue tested below;
    // otherwise ready_any (priority, run_at, id) with (priority, run_at, id) >= the floor of
    // all queues AND run_at <= now, each row's queue tested below. The SQL's index conditions.
    let (one, first) = match queues {
        Queues::One(q) => (Some((*q, std::str::from_utf8(text(*q)).ok()?.to_owned())), 2i16),
        _ => (None, 1i16),
    };
    let want: &[i16] = if one.is_some() { &[l.r_queue_hash, l.r_priority, l.r_run_at, l.r_id] } else { &[l.r_priority, l.r_run_at, l.r_id] };
    let ix = (*r.index).rd_index;
    let n_cols = want.len();
    if (*ix).indrelid != (*r.ready).rd_id || (*ix).indnkeyatts as usize != n_cols || (*ix).indkey.values.as_slice(n_cols) != want || !(*r.index).rd_indexprs.is_null() {
        return None;
    }
    let (fp, fr, fi) = crate::floors::floor((*r.ready).rd_id, one.as_ref().map(|(_, name)| name.as_str()));
    let mut row: [pg_sys::ScanKeyData; 3] = std::mem::zeroed();
    let oid = pg_sys::Oid::from;
    let mut keys: [pg_sys::ScanKeyData; 3] = std::mem::zeroed();
    let mut nkeys = 0;
    if let Some((q, _)) = &one {
        let hash = crate::rows::hashtext(*q);
        pg_sys::ScanKeyEntryInitialize(&mut keys[0], 0, 1, pg_sys::BTEqualStrategyNumber as u16, pg_sys::INT4OID, pg_sys::InvalidOid, oid(pg_sys::F_INT4EQ), hash);
        nkeys = 1;
    }
    let floor = [
        (pg_sys::INT4OID, pg_sys::F_BTINT4CMP, pg_sys::Datum::from(fp)),
        (pg_sys::TIMESTAMPTZOID, pg_sys::F_TIMESTAMPTZ_CMP, pg_sys::Datum::from(fr)),
        (pg_sys::INT8OID, pg_sys::F_BTINT8CMP, pg_sys::Datum::from(fi)),
    ];
    crate::rows::row_ge(&mut keys[nkeys], &mut row, first, &floor);
    pg_sys::ScanKeyEntryInitialize(
        &mut keys[nkeys + 1],
        0,
        first + 1,
        pg_sys::BTLessEqualStrategyNumber as u16,
        pg_sys::TIMESTAMPTZOID,
        pg_sys::InvalidOid,
        oid(pg_sys::F_TIMESTAMPTZ_LE),
        pg_sys::Datum::from(now),
    );
    nkeys += 2;
    let scan = crate::rows::begin_index_scan(r.ready, r.index, snapshot, &mut keys[..nkeys], false);
    let slot = pg_sys::table_slot_create(r.ready, null_mut());
    let (mut n, mut rest) = (0, false);
    while n < max && pg_sys::index_getnext_slot(scan, pg_sys::ScanDirection::ForwardScanDirection, slot) {
        let t = pg_sys::ExecFetchSlotHeapTuple(slot, false, null_mut());
        let queue = text(attr(t, (*r.ready).rd_att, l.r_queue as i32).unwrap_or_else(|| error!("jobq: a ready row without a queue")));
        // One queue: a row of another queue with the same hash is not ours.
        let ours = match (&one, queues) {
            (Some((_, name)), _) => name.as_bytes() == queue,
            (None, Queues::Some(names)) => names.iter().any(|n| n.as_slice() == queue),
            _ => true,
        };
        if !ours {
            continue;
        }
        match c.try_row(slot, snapshot) {
            Took::Started => n += 1,
            Took::Changed => rest = true,
            Took::Passed => {}
        }
    }
    pg_sys::ExecDropSingleTupleTableSlot(slot);
    pg_sys::index_endscan(scan);
    Some((n, rest))
}

/// What a claim of a waiting job did with it.
pub(crate) enum Took {
    /// Claimed, started and added to the result.
    Started,
    /// Passed over: paused, held by another transaction, or unable to start now (its keys,
    /// noted for the rest of the call).
    Passed,
    /// Changed since the call's snapshot (a `replace` moved it): the SQL looks at its newest
    /// version.
    Changed,
}

/// One call's claims: what they read once and what they write, set up at the first claim.
pub(crate) struct Claimer<'a> {
    r: &'a Rels,
    l: Layout,
    worker: pg_sys::Datum,
    pub(crate) now: pg_sys::TimestampTz,
    store: *mut pg_sys::Tuplestorestate,
    desc: pg_sys::TupleDesc,
    pauses: Pauses,
    writer: Option<Writer>,
    blocked: Blocked,
    slots: Option<Option<Slots>>, // opened at the first job that needs a slot
}

impl Claimer<'_> {
    pub(crate) fn ready(&self) -> pg_sys::Relation {
        self.r.ready
    }

    pub(crate) fn layout(&self) -> &Layout {
        &self.l
    }

    /// Whether a pause holds back the waiting job of the ready row `t`.
    pub(crate) unsafe fn paused(&self, t: pg_sys::HeapTuple) -> bool {
        if self.pauses.0.is_empty() {
            return false;
        }
        let get = |attno: i32| attr(t, (*self.r.ready).rd_att, attno);
        let queue = get(self.l.r_queue as i32).map_or(&b""[..], |d| text(d));
        self.pauses.hold(queue, get(self.l.r_kind).map(|d| text(d)))
    }

    /// Claims the waiting job whose ready row is in `slot` (of this call's queue), as the SQL's
    /// `FOR UPDATE SKIP LOCKED` walk does: passed over when paused or held by another
    /// transaction; a keyed job's slots, rate start or key taken (or, when it cannot start,
    /// left locked and the later jobs of its key passed over for the rest of the call); then
    /// its ready row deleted and its job row marked executing.
    pub(crate) unsafe fn try_row(&mut self, slot: *mut pg_sys::TupleTableSlot, snapshot: pg_sys::Snapshot) -> Took {
        let (r, l, now) = (self.r, self.l, self.now);
        let t = pg_sys::ExecFetchSlotHeapTuple(slot, false, null_mut());
        let rdesc = (*r.ready).rd_att;
        let get = |attno: i32| attr(t, rdesc, attno);
        if self.paused(t) {
            return Took::Passed;
        }
        let id = get(l.r_id as i32).unwrap_or_else(|| error!("jobq: a ready row without a job id")).value() as i64;
        let mut tid = (*slot).tts_tid;
        // The SQL's statements see what this call did so far (a slot it took).
        let cid = pg_sys::GetCurrentCommandId(true);
        let mut fetched = None; // the job row, when read already
        let started = if get(l.r_keyed).is_some_and(|d| d.value() != 0) {
            // A keyed job: locked (not waiting), then what it needs to start taken by
            // jobq._take_keys, which deletes its ready row; or, when it cannot start now, left
            // locked, and later jobs of the same key passed over for the rest of the call, as
            // the SQL does.
            let text_of = |attno| get(attno).map(|d| text(d).to_vec());
            let keys = Keys {
                concurrency: text_of(l.r_ckey).map(|k| (k, get(l.r_climit).map_or(0, |d| d.value() as i32))),
                while_key: text_of(l.r_while),
                rate: text_of(l.r_rate),
            };
            if self.blocked.blocks(&keys) {
                return Took::Passed;
            }
            match lock(r.ready, tid, cid) {
                pg_sys::TM_Result::TM_Ok => {}
                pg_sys::TM_Result::TM_Updated => return Took::Changed,
                _ => return Took::Passed,
            }
            // A job that needs only slots (of a concurrency key, of a while_executing key)
            // takes them here (src/slots.rs) and loses its ready row; a job with a rate key or
            // an until_executing key goes through jobq._take_keys.
            let mut got = None;
            if keys.rate.is_none() && (keys.concurrency.is_some() || keys.while_key.is_some()) {
                let row = job_row(r.live, &l, id, snapshot);
                if let (Some(own), Some(s)) = (own_keys(r.live, &l, row), self.slots.get_or_insert_with(|| Slots::open()).as_mut()) {
                    got = Some(take(s, &own, id, r.ready, &mut tid, cid));
                    fetched = Some(row);
                }
            }
            let got = got.unwrap_or_else(|| {
                let args = [
                    DatumWithOid::new(pg_sys::Datum::from(id), pg_sys::INT8OID),
                    DatumWithOid::new(pg_sys::Datum::from(&mut tid as *mut pg_sys::ItemPointerData), pg_sys::TIDOID),
                    DatumWithOid::new(pg_sys::Datum::from(now), pg_sys::TIMESTAMPTZOID),
                ];
                kept("SELECT jobq._take_keys($1, $2, $3)", &[pg_sys::INT8OID, pg_sys::TIDOID, pg_sys::TIMESTAMPTZOID], &args)
                    .unwrap_or_else(|| error!("jobq: jobq._take_keys returned NULL"))
            });
            if got < 0 {
                self.blocked.add(got, keys);
                return Took::Passed;
            }
            // Its concurrency slot (0: it has no concurrency key).
            (got > 0).then_some(got)
        } else {
            let mut tmfd: pg_sys::TM_FailureData = std::mem::zeroed();
            let mut deleted = pg_sys::heap_delete(r.ready, &mut tid, cid, null_mut(), false, &mut tmfd, false);
            // Locked by this very transaction (a `replace` of the job locks its ready row before
            // it moves it): FOR UPDATE SKIP LOCKED takes a row its own transaction holds, and so
            // does this. Deleting with `wait` then waits for no one: heap_delete sleeps only for
            // a locker other than the current transaction, and nothing else can hold the row
            // while this transaction locks it FOR UPDATE (no key-share locker: no foreign key
            // points at jobq.ready).
            if deleted == pg_sys::TM_Result::TM_BeingModified && pg_sys::TransactionIdIsCurrentTransactionId(tmfd.xmax) {
                deleted = pg_sys::heap_delete(r.ready, &mut tid, cid, null_mut(), true, &mut tmfd, false);
            }
            match deleted {
                pg_sys::TM_Result::TM_Ok => {}
                // Changed since our snapshot (a replace moved it): the SQL looks at its newest version.
                pg_sys::TM_Result::TM_Updated => return Took::Changed,
                // Held by another transaction (a checkout, a cancel): passed over as SKIP LOCKED
                // does; or claimed and committed since our snapshot.
                _ => return Took::Passed,
            }
            None
        };
        let w = self.writer.get_or_insert_with(|| Writer::new(r.live, &l));
        let row = fetched.unwrap_or_else(|| job_row(r.live, &l, id, snapshot));
        start(r.live, w, &l, row, started, self.worker, now, self.store, self.desc);
        Took::Started
    }

    unsafe fn close(self) {
        if let Some(w) = self.writer {
            w.entries.close();
        }
        if let Some(Some(s)) = self.slots {
            s.close();
        }
    }
}

/// The job row of job `id`, whose ready row this call holds: nothing changes it meanwhile
/// (every writer of a waiting job takes its ready row first: docs/internals.md, "Lock order").
unsafe fn job_row(live: pg_sys::Relation, l: &Layout, id: i64, snapshot: pg_sys::Snapshot) -> pg_sys::HeapTuple {
    fetch(live, (l.id + 1) as i16, pg_sys::F_INT8EQ, pg_sys::Datum::from(id), snapshot)
        .unwrap_or_else(|| error!("jobq: job {id} has a ready row but no job row at its claim"))
}

/// The slots a waiting job needs to start, from its job row (as jobq._take_keys reads them).
struct OwnKeys {
    while_key: Option<Vec<u8>>,
    concurrency: Option<(Vec<u8>, i32)>,
}

/// The slots the job of `row` needs, when slots are all it needs; None when it has a rate key
/// or gives up an until_executing key (jobq._take_keys does those).
unsafe fn own_keys(live: pg_sys::Relation, l: &Layout, row: pg_sys::HeapTuple) -> Option<OwnKeys> {
    let desc = (*live).rd_att;
    let get = |c: usize| attr(row, desc, (c + 1) as i32);
    if get(l.rate_key).is_some() {
        return None;
    }
    let strategy = get(l.unique_strategy).map(|d| text(d));
    if strategy == Some(b"until_executing") {
        return None;
    }
    let while_key = if strategy == Some(b"while_executing") { Some(text(get(l.unique_key)?).to_vec()) } else { None };
    let concurrency = match get(l.concurrency_key) {
        Some(k) => Some((text(k).to_vec(), get(l.concurrency_limit)?.value() as i32)),
        None => None,
    };
    Some(OwnKeys { while_key, concurrency })
}

/// What jobq._take_keys does for a job that needs only slots: its while_executing key's slot,
/// then a slot of its concurrency key, then its ready row (at `tid`, which this call holds
/// locked) deleted. Its concurrency slot (0: none); -2 or -1 (as _take_keys) when one is taken.
unsafe fn take(s: &mut Slots, own: &OwnKeys, id: i64, ready: pg_sys::Relation, tid: &mut pg_sys::ItemPointerData, cid: pg_sys::CommandId) -> i32 {
    let while_slot = match &own.while_key {
        Some(k) => match s.choose(b'u', k, 1) {
            Some(slot) => Some((k, slot)),
            None => return -2,
        },
        None => None,
    };
    let slot = match &own.concurrency {
        Some((k, limit)) => match s.choose(b'c', k, *limit) {
            Some(slot) => Some((k, slot)),
            None => return -1,
        },
        None => None,
    };
    if let Some((k, n)) = while_slot {
        s.insert(b'u', k, n, id);
    }
    if let Some((k, n)) = slot {
        s.insert(b'c', k, n, id);
    }
    let mut tmfd: pg_sys::TM_FailureData = std::mem::zeroed();
    // The row this call holds locked, as jobq._take_keys deletes it (with wait: only this
    // transaction's own lock is there, nothing is awaited).
    if pg_sys::heap_delete(ready, tid, cid, null_mut(), true, &mut tmfd, false) != pg_sys::TM_Result::TM_Ok {
        error!("jobq: the ready row of job {id} was not found at its claim");
    }
    slot.map_or(0, |(_, n)| n)
}

/// Marks the job of `row`, whose ready row this transaction just deleted, executing under `worker`
/// (holding concurrency slot `slot`), notes it and adds its row to `store`.
#[allow(clippy::too_many_arguments)]
unsafe fn start(
    live: pg_sys::Relation,
    w: &Writer,
    l: &Layout,
    row: pg_sys::HeapTuple,
    slot: Option<i32>,
    worker: pg_sys::Datum,
    now: pg_sys::TimestampTz,
    store: *mut pg_sys::Tuplestorestate,
    desc: pg_sys::TupleDesc,
) {
    let jdesc = (*live).rd_att;
    let natts = (*jdesc).natts as usize;
    let mut values = vec![pg_sys::Datum::from(0usize); natts];
    let mut nulls = vec![false; natts];
    pg_sys::heap_deform_tuple(row, jdesc, values.as_mut_ptr(), nulls.as_mut_ptr());
    let id = values[l.id].value() as i64;
    let internal = |what: &str| -> ! {
        // XX000, as error! raises
        error!("jobq: job {id} {what} at its claim")
    };
    if nulls[l.state] || text(values[l.state]) != b"ready" {
        internal("has a ready row but is not ready");
    }
    values[l.state] = w.executing;
    (values[l.worker_id], nulls[l.worker_id]) = (worker, false);
    values[l.attempt] = pg_sys::Datum::from(values[l.attempt].value() as i32 + 1);
    (values[l.started_at], nulls[l.started_at]) = (pg_sys::Datum::from(now), false);
    (values[l.concurrency_slot], nulls[l.concurrency_slot]) = (pg_sys::Datum::from(slot.unwrap_or(0)), slot.is_none());
    let cid = pg_sys::GetCurrentCommandId(true);
    let new = pg_sys::heap_form_tuple(jdesc, values.as_mut_ptr(), nulls.as_mut_ptr());
    if !w.entries.update(live, &mut (*row).t_self, new, cid) {
        internal("changed");
    }
    let ts = |t: i64| TimestampWithTimeZone::try_from(t).ok();
    if let (Ok(queue), Some(at)) = (std::str::from_utf8(text(values[l.queue])), ts(now)) {
        tally(queue, "started", ts(values[l.run_at].value() as i64), at);
    }
    let mut out_v = [pg_sys::Datum::from(0usize); 32];
    let mut out_n = [false; 32];
    for i in 0..l.n_out {
        let c = l.out[i] as usize;
        (out_v[i], out_n[i]) = (values[c], nulls[c]);
    }
    pg_sys::tuplestore_putvalues(store, desc, out_v.as_mut_ptr(), out_n.as_mut_ptr());
}

/// The rows of jobq.pauses, read once per call: usually none.
struct Pauses(Vec<Pause>);

/// A pause: of a queue (every kind, or one kind), or of a kind in every queue (queue None).
struct Pause {
    queue: Option<Vec<u8>>,
    kind: Option<Vec<u8>>,
}

impl Pauses {
    /// None when jobq.pauses lacks its text columns queue and kind (then the SQL serves).
    unsafe fn read(pauses: pg_sys::Relation, snapshot: pg_sys::Snapshot) -> Option<Pauses> {
        let desc = (*pauses).rd_att;
        let col = |name| column(desc, name).filter(|&i| (*tupdesc_attr(desc, i)).atttypid == pg_sys::TEXTOID);
        let (queue, kind) = (col("queue")? as i32 + 1, col("kind")? as i32 + 1);
        let mut rows = Vec::new();
        let scan = pg_sys::systable_beginscan(pauses, pg_sys::InvalidOid, false, snapshot, 0, null_mut());
        loop {
            let t = pg_sys::systable_getnext(scan);
            if t.is_null() {
                break;
            }
            let get = |attno| attr(t, desc, attno).map(|d| text(d).to_vec());
            rows.push(Pause { queue: get(queue), kind: get(kind) });
        }
        pg_sys::systable_endscan(scan);
        Some(Pauses(rows))
    }

    /// Whether a waiting job of `queue` and `kind` is paused, as the SQL's condition says: a
    /// pause of its queue (of every kind, or of its kind), or of its kind in every queue.
    fn hold(&self, queue: &[u8], kind: Option<&[u8]>) -> bool {
        self.0.iter().any(|p| match &p.queue {
            Some(q) => q.as_slice() == queue && (p.kind.is_none() || (kind.is_some() && p.kind.as_deref() == kind)),
            None => kind.is_some() && p.kind.as_deref() == kind,
        })
    }
}

/// The keys of a keyed waiting job, as its ready row has them.
struct Keys {
    concurrency: Option<(Vec<u8>, i32)>,
    while_key: Option<Vec<u8>>,
    rate: Option<Vec<u8>>,
}

/// The keys found unable to start during this call: concurrency keys full (for jobs with
/// this limit or a lower one), while_executing keys busy, rate keys without a start left.
#[derive(Default)]
struct Blocked {
    concurrency: Vec<(Vec<u8>, i32)>,
    while_keys: Vec<Vec<u8>>,
    rates: Vec<Vec<u8>>,
}

impl Blocked {
    fn blocks(&self, k: &Keys) -> bool {
        k.concurrency.as_ref().is_some_and(|(key, limit)| self.concurrency.iter().any(|(b, l)| b == key && limit <= l))
            || k.while_key.as_ref().is_some_and(|key| self.while_keys.contains(key))
            || k.rate.as_ref().is_some_and(|key| self.rates.contains(key))
    }

    /// Notes why a job could not start (jobq._take_keys's answer: -1, -2 or -3).
    fn add(&mut self, why: i32, k: Keys) {
        match why {
            -1 => self.concurrency.extend(k.concurrency),
            -2 => self.while_keys.extend(k.while_key),
            _ => self.rates.extend(k.rate),
        }
    }
}

/// Locks the ready row at `tid` as FOR UPDATE SKIP LOCKED does (TM_WouldBlock when another
/// transaction holds it), without following a newer version.
pub(crate) unsafe fn lock(ready: pg_sys::Relation, tid: pg_sys::ItemPointerData, cid: pg_sys::CommandId) -> pg_sys::TM_Result::Type {
    let mut tuple: pg_sys::HeapTupleData = std::mem::zeroed();
    tuple.t_self = tid;
    let mut buffer: pg_sys::Buffer = pg_sys::InvalidBuffer as pg_sys::Buffer;
    let mut tmfd: pg_sys::TM_FailureData = std::mem::zeroed();
    let rc = pg_sys::heap_lock_tuple(
        ready,
        &mut tuple,
        cid,
        pg_sys::LockTupleMode::LockTupleExclusive,
        pg_sys::LockWaitPolicy::LockWaitSkip,
        false,
        &mut buffer,
        &mut tmfd,
    );
    if buffer != pg_sys::InvalidBuffer as pg_sys::Buffer {
        pg_sys::ReleaseBuffer(buffer);
    }
    rc
}

/// What a claim writes besides the row, set up at the first claim of a call: the job row's
/// index entries, and the state it is given.
struct Writer {
    entries: IndexEntries,
    executing: pg_sys::Datum,
}

impl Writer {
    unsafe fn new(live: pg_sys::Relation, l: &Layout) -> Writer {
        let set = [l.state, l.worker_id, l.attempt, l.started_at, l.concurrency_slot].map(|c| (c + 1) as i16);
        let executing = pg_sys::Datum::from(pg_sys::cstring_to_text(c"executing".as_ptr()));
        Writer { entries: IndexEntries::open(live, Some(&set)), executing }
    }
}

/// The layout, once per backend and set of tables; None when a table or the result type is not
/// what the fast path names (then the SQL serves). The index's columns are checked per call.
unsafe fn layout(r: &Rels, desc: pg_sys::TupleDesc) -> Option<Layout> {
    let key = ((*r.ready).rd_id, (*r.live).rd_id, (*desc).tdtypeid);
    if let Some(l) = LAYOUT.get().filter(|l| (l.ready, l.live, l.result) == key) {
        return Some(l);
    }
    let (rd, jd) = ((*r.ready).rd_att, (*r.live).rd_att);
    let rcol = |name| column(rd, name).map(|i| (i + 1) as i16);
    let jcol = |name| column(jd, name);
    let n_out = (*desc).natts as usize;
    let mut out = [0u8; 32];
    if n_out > out.len() {
        return None;
    }
    for (i, slot) in out.iter_mut().enumerate().take(n_out) {
        let a = tupdesc_attr(desc, i);
        let c = jcol(CStr::from_ptr((*a).attname.data.as_ptr()).to_str().ok()?)?;
        if (*tupdesc_attr(jd, c)).atttypid != (*a).atttypid || (*a).attisdropped {
            return None;
        }
        *slot = c as u8;
    }
    let l = Layout {
        ready: key.0,
        live: key.1,
        result: key.2,
        r_queue: rcol("queue")?,
        r_queue_hash: rcol("queue_hash")?,
        r_priority: rcol("priority")?,
        r_run_at: rcol("run_at")?,
        r_id: rcol("id")?,
        r_kind: rcol("kind")? as i32,
        r_keyed: rcol("keyed")? as i32,
        r_ckey: rcol("concurrency_key")? as i32,
        r_climit: rcol("concurrency_limit")? as i32,
        r_while: rcol("while_key")? as i32,
        r_rate: rcol("rate_key")? as i32,
        id: jcol("id")?,
        queue: jcol("queue")?,
        state: jcol("state")?,
        attempt: jcol("attempt")?,
        worker_id: jcol("worker_id")?,
        run_at: jcol("run_at")?,
        started_at: jcol("started_at")?,
        concurrency_slot: jcol("concurrency_slot")?,
        unique_key: jcol("unique_key")?,
        unique_strategy: jcol("unique_strategy")?,
        concurrency_key: jcol("concurrency_key")?,
        concurrency_limit: jcol("concurrency_limit")?,
        rate_key: jcol("rate_key")?,
        out,
        n_out,
    };
    LAYOUT.set(Some(l));
    Some(l)
}
