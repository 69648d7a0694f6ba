//! Rows read and written without a plan (src/complete.rs, src/checkout.rs, src/liveness.rs):
//! one row by primary key, a new row version's index entries, and the SQL functions those paths
//! call through the function manager. A statement's executor start-up costs more than the
//! work itself (docs/performance.md, "CPU per job").
use pgrx::pg_sys;
use std::ffi::CStr;

/// An index scan of `rel` through `index` in `snapshot`, with `keys`; with `want_itup`, each
/// entry read is given in `xs_itup` too (set before the rescan, which sizes B-tree's buffer
/// for them). PostgreSQL 18's `index_beginscan` takes the scan's instrumentation as well.
pub unsafe fn begin_index_scan(
    rel: pg_sys::Relation,
    index: pg_sys::Relation,
    snapshot: pg_sys::Snapshot,
    keys: &mut [pg_sys::ScanKeyData],
    want_itup: bool,
) -> pg_sys::IndexScanDesc {
    let n = keys.len() as i32;
    #[cfg(not(feature = "pg18"))]
    let scan = pg_sys::index_beginscan(rel, index, snapshot, n, 0);
    #[cfg(feature = "pg18")]
    let scan = pg_sys::index_beginscan(rel, index, snapshot, std::ptr::null_mut(), n, 0);
    (*scan).xs_want_itup = want_itup;
    pg_sys::index_rescan(scan, keys.as_mut_ptr(), n, std::ptr::null_mut(), 0);
    scan
}

/// The first row of `rel` whose column `attno` equals `key` (`eq`: the equality function of
/// its type), through its primary key, in `snapshot`; a copy. None when there is none.
pub unsafe fn fetch(
    rel: pg_sys::Relation,
    attno: i16,
    eq: u32,
    key: pg_sys::Datum,
    snapshot: pg_sys::Snapshot,
) -> Option<pg_sys::HeapTuple> {
    let mut copy = None;
    each_by_pk(rel, attno, eq, key, snapshot, |t| {
        copy = Some(pg_sys::heap_copytuple(t));
        false
    });
    copy
}

/// Calls `each` with every row of `rel` whose column `attno` (the primary key's first) equals
/// `key`, as `fetch` finds them, until it returns false; the row is valid during the call
/// only. Nothing when `rel` has no primary key.
pub unsafe fn each_by_pk(
    rel: pg_sys::Relation,
    attno: i16,
    eq: u32,
    key: pg_sys::Datum,
    snapshot: pg_sys::Snapshot,
    mut each: impl FnMut(pg_sys::HeapTuple) -> bool,
) {
    pg_sys::RelationGetIndexList(rel); // fills rd_pkindex
    let pk = (*rel).rd_pkindex;
    if pk == pg_sys::InvalidOid {
        return;
    }
    let mut skey: pg_sys::ScanKeyData = std::mem::zeroed();
    pg_sys::ScanKeyInit(&mut skey, attno, pg_sys::BTEqualStrategyNumber as u16, pg_sys::Oid::from(eq), key);
    let scan = pg_sys::systable_beginscan(rel, pk, true, snapshot, 1, &mut skey);
    loop {
        let t = pg_sys::systable_getnext(scan);
        if t.is_null() || !each(t) {
            break;
        }
    }
    pg_sys::systable_endscan(scan);
}

/// Makes `header` the B-tree scan key of a row comparison: the index's columns from `attno` on
/// at or after the values of `cols` (each column's type, B-tree comparison function and value),
/// its members written to `members`, which must outlive the scan. Where a walk starts from a
/// row it remembers (src/checkout.rs, src/fairness.rs).
pub unsafe fn row_ge(header: &mut pg_sys::ScanKeyData, members: &mut [pg_sys::ScanKeyData], attno: i16, cols: &[(pg_sys::Oid, u32, pg_sys::Datum)]) {
    let ge = pg_sys::BTGreaterEqualStrategyNumber as u16;
    for (i, &(typ, cmp, value)) in cols.iter().enumerate() {
        let end = if i + 1 == cols.len() { pg_sys::SK_ROW_END as i32 } else { 0 };
        pg_sys::ScanKeyEntryInitialize(&mut members[i], pg_sys::SK_ROW_MEMBER as i32 | end, attno + i as i16, ge, typ, pg_sys::InvalidOid, pg_sys::Oid::from(cmp), value);
    }
    header.sk_flags = pg_sys::SK_ROW_HEADER as i32;
    header.sk_attno = attno;
    header.sk_strategy = ge;
    header.sk_argument = pg_sys::Datum::from(members.as_mut_ptr());
}

/// Attribute `attno` (1-based) of tuple `t` described by `desc`; None when it is NULL.
pub unsafe fn attr(t: pg_sys::HeapTuple, desc: pg_sys::TupleDesc, attno: i32) -> Option<pg_sys::Datum> {
    let mut null = false;
    let d = pg_sys::heap_getattr(t, attno, desc, &mut null);
    (!null).then_some(d)
}

/// Inserting the index entries of new row versions of one table as the executor does them
/// (unique checks, partial and summarizing indexes), for one call's inserts or updates.
pub struct IndexEntries {
    estate: *mut pg_sys::EState,
    rri: *mut pg_sys::ResultRelInfo,
    slot: *mut pg_sys::TupleTableSlot,
    update: bool,
}

impl IndexEntries {
    /// For `rel`'s inserts (`changed` None) or its updates that set the 1-based columns
    /// `changed`. The relation is in no range table (index 0), so the executor cannot work out
    /// which indexes an update leaves logically unchanged (a hint to B-tree's bottom-up
    /// deletion): it is said here, from `changed`.
    pub unsafe fn open(rel: pg_sys::Relation, changed: Option<&[i16]>) -> IndexEntries {
        let entries = IndexEntries::new(rel, false);
        let rri = entries.rri;
        if let Some(changed) = changed {
            for i in 0..(*rri).ri_NumIndices as usize {
                let info = *(*rri).ri_IndexRelationInfo.add(i);
                let cols = &(&(*info).ii_IndexAttrNumbers)[..(*info).ii_NumIndexAttrs as usize];
                (*info).ii_CheckedUnchanged = true;
                (*info).ii_IndexUnchanged = cols.iter().all(|&a| a > 0 && !changed.contains(&a));
            }
        }
        IndexEntries { update: changed.is_some(), ..entries }
    }

    /// `rel`'s indexes opened (`speculative`: with what a conflict check needs), for inserts.
    unsafe fn new(rel: pg_sys::Relation, speculative: bool) -> IndexEntries {
        let estate = pg_sys::CreateExecutorState();
        let rri = pg_sys::palloc0(std::mem::size_of::<pg_sys::ResultRelInfo>()) as *mut pg_sys::ResultRelInfo;
        (*rri).type_ = pg_sys::NodeTag::T_ResultRelInfo;
        pg_sys::InitResultRelInfo(rri, rel, 0, std::ptr::null_mut(), 0);
        pg_sys::ExecOpenIndices(rri, speculative);
        let slot = pg_sys::MakeSingleTupleTableSlot((*rel).rd_att, &pg_sys::TTSOpsHeapTuple);
        IndexEntries { estate, rri, slot, update: false }
    }

    /// The entries of the new version `t` in every index, or in the summarizing ones only
    /// (PostgreSQL 16+: a HOT update that changed only summarized columns).
    pub unsafe fn add(&self, t: pg_sys::HeapTuple, only_summarizing: bool) {
        pg_sys::ExecStoreHeapTuple(t, self.slot, false);
        #[cfg(feature = "pg15")]
        {
            debug_assert!(!only_summarizing);
            pg_sys::ExecInsertIndexTuples(self.rri, self.slot, self.estate, self.update, false, std::ptr::null_mut(), std::ptr::null_mut());
        }
        #[cfg(not(feature = "pg15"))]
        pg_sys::ExecInsertIndexTuples(
            self.rri,
            self.slot,
            self.estate,
            self.update,
            false,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            only_summarizing,
        );
        pg_sys::ExecClearTuple(self.slot);
        self.reset_per_tuple();
    }

    /// Replaces the version at `otid` of `rel`'s row, which this transaction holds, with `new`
    /// (`heap_update`, so waiting for no one), and adds the index entries the update needs:
    /// none for a HOT update, the summarizing indexes' for one that changed only their columns
    /// (PostgreSQL 16+), every index's otherwise. False when the row was not updated.
    pub unsafe fn update(&self, rel: pg_sys::Relation, otid: *mut pg_sys::ItemPointerData, new: pg_sys::HeapTuple, cid: pg_sys::CommandId) -> bool {
        let mut tmfd: pg_sys::TM_FailureData = std::mem::zeroed();
        let mut lockmode: pg_sys::LockTupleMode::Type = 0;
        #[cfg(feature = "pg15")]
        {
            if pg_sys::heap_update(rel, otid, new, cid, std::ptr::null_mut(), true, &mut tmfd, &mut lockmode) != pg_sys::TM_Result::TM_Ok {
                return false;
            }
            if (*(*new).t_data).t_infomask2 & pg_sys::HEAP_ONLY_TUPLE as u16 == 0 {
                self.add(new, false);
            }
        }
        #[cfg(not(feature = "pg15"))]
        {
            let mut which = pg_sys::TU_UpdateIndexes::TU_None;
            if pg_sys::heap_update(rel, otid, new, cid, std::ptr::null_mut(), true, &mut tmfd, &mut lockmode, &mut which) != pg_sys::TM_Result::TM_Ok {
                return false;
            }
            match which {
                pg_sys::TU_UpdateIndexes::TU_All => self.add(new, false),
                pg_sys::TU_UpdateIndexes::TU_Summarizing => self.add(new, true),
                _ => {}
            }
        }
        true
    }

    /// Frees what the last row's index predicates and expressions allocated.
    unsafe fn reset_per_tuple(&self) {
        let econtext = (*self.estate).es_per_tuple_exprcontext;
        if !econtext.is_null() {
            pg_sys::MemoryContextReset((*econtext).ecxt_per_tuple_memory);
        }
    }

    /// For `rel`'s inserts that must not conflict with a row of its unique indexes, as `INSERT
    /// ... ON CONFLICT DO NOTHING` inserts ([`IndexEntries::insert_unless_conflict`]).
    pub unsafe fn open_speculative(rel: pg_sys::Relation) -> IndexEntries {
        IndexEntries::new(rel, true)
    }

    /// Inserts `t` into `rel` (opened with [`IndexEntries::open_speculative`]) with its index
    /// entries, as `INSERT ... ON CONFLICT DO NOTHING` does (ExecInsert's speculative
    /// insertion): false, having inserted nothing, when a unique index holds a row with the
    /// same key, committed or inserted by a transaction still running (this one waits for its
    /// outcome first, as any unique index does).
    pub unsafe fn insert_unless_conflict(&self, rel: pg_sys::Relation, t: pg_sys::HeapTuple, cid: pg_sys::CommandId) -> bool {
        loop {
            pg_sys::ExecStoreHeapTuple(t, self.slot, false);
            let mut conflict: pg_sys::ItemPointerData = std::mem::zeroed();
            #[cfg(not(feature = "pg18"))]
            let free = pg_sys::ExecCheckIndexConstraints(self.rri, self.slot, self.estate, &mut conflict, std::ptr::null_mut());
            #[cfg(feature = "pg18")]
            let free = pg_sys::ExecCheckIndexConstraints(self.rri, self.slot, self.estate, &mut conflict, std::ptr::null_mut(), std::ptr::null_mut());
            pg_sys::ExecClearTuple(self.slot);
            if !free {
                return false;
            }
            // The row goes in marked speculative, under a lock that a transaction meeting its
            // index entry waits on; it is made final once no index entry conflicted, and
            // taken back otherwise (a taker of the same key got in between: look again).
            let xid = pg_sys::GetCurrentTransactionId();
            let token = pg_sys::SpeculativeInsertionLockAcquire(xid);
            let ctid = &mut (*(*t).t_data).t_ctid;
            ctid.ip_blkid.bi_hi = (token >> 16) as u16;
            ctid.ip_blkid.bi_lo = (token & 0xffff) as u16;
            ctid.ip_posid = pg_sys::SpecTokenOffsetNumber as u16;
            pg_sys::heap_insert(rel, t, cid, pg_sys::HEAP_INSERT_SPECULATIVE as i32, std::ptr::null_mut());
            pg_sys::ExecStoreHeapTuple(t, self.slot, false);
            let mut conflicted = false;
            #[cfg(feature = "pg15")]
            pg_sys::ExecInsertIndexTuples(self.rri, self.slot, self.estate, false, true, &mut conflicted, std::ptr::null_mut());
            #[cfg(not(feature = "pg15"))]
            pg_sys::ExecInsertIndexTuples(self.rri, self.slot, self.estate, false, true, &mut conflicted, std::ptr::null_mut(), false);
            pg_sys::ExecClearTuple(self.slot);
            if conflicted {
                pg_sys::heap_abort_speculative(rel, &mut (*t).t_self);
            } else {
                pg_sys::heap_finish_speculative(rel, &mut (*t).t_self);
            }
            pg_sys::SpeculativeInsertionLockRelease(xid);
            self.reset_per_tuple();
            if !conflicted {
                return true;
            }
        }
    }

    pub unsafe fn close(self) {
        pg_sys::ExecDropSingleTupleTableSlot(self.slot);
        pg_sys::ExecCloseIndices(self.rri);
        pg_sys::FreeExecutorState(self.estate);
    }
}

/// A new row of a table: every column NULL until set.
pub struct NewRow {
    values: Vec<pg_sys::Datum>,
    nulls: Vec<bool>,
}

impl NewRow {
    pub unsafe fn of(rel: pg_sys::Relation) -> NewRow {
        let natts = (*(*rel).rd_att).natts as usize;
        NewRow { values: vec![pg_sys::Datum::from(0usize); natts], nulls: vec![true; natts] }
    }

    /// Column `i` (0-based) set to `d`; None leaves it NULL.
    pub fn set(&mut self, i: usize, d: Option<pg_sys::Datum>) {
        if let Some(d) = d {
            self.values[i] = d;
            self.nulls[i] = false;
        }
    }

    /// The row as a tuple of `rel`.
    pub unsafe fn form(&mut self, rel: pg_sys::Relation) -> pg_sys::HeapTuple {
        pg_sys::heap_form_tuple((*rel).rd_att, self.values.as_mut_ptr(), self.nulls.as_mut_ptr())
    }
}

/// Inserts tuple `t` into `rel` with its index entries (unique checks and partial indexes as
/// the executor does them).
pub unsafe fn insert(rel: pg_sys::Relation, t: pg_sys::HeapTuple, cid: pg_sys::CommandId) {
    pg_sys::heap_insert(rel, t, cid, 0, std::ptr::null_mut());
    let entries = IndexEntries::open(rel, None);
    entries.add(t, false);
    entries.close();
}

/// Whether every column of `desc` is one of `cols` (name, type), a dropped one apart: a table
/// whose columns a path without a plan writes, with no default or type it would not know.
pub unsafe fn only_columns(desc: pg_sys::TupleDesc, cols: &[(&str, pg_sys::Oid)]) -> bool {
    (0..(*desc).natts as usize).all(|i| {
        let att = tupdesc_attr(desc, i);
        let name = CStr::from_ptr((*att).attname.data.as_ptr()).to_str().unwrap_or("");
        (*att).attisdropped || cols.iter().any(|&(n, t)| n == name && t == (*att).atttypid)
    })
}

pub unsafe fn tupdesc_attr(desc: pg_sys::TupleDesc, i: usize) -> *mut pg_sys::FormData_pg_attribute {
    #[cfg(not(feature = "pg18"))]
    {
        (*desc).attrs.as_mut_ptr().add(i)
    }
    #[cfg(feature = "pg18")]
    {
        pg_sys::TupleDescAttr(desc, i as i32)
    }
}

/// The 0-based position of column `name` of `desc`.
pub unsafe fn column(desc: pg_sys::TupleDesc, name: &str) -> Option<usize> {
    (0..(*desc).natts as usize).find(|&i| CStr::from_ptr((*tupdesc_attr(desc, i)).attname.data.as_ptr()).to_bytes() == name.as_bytes())
}

/// The bytes of a text datum (detoasted in the current memory context when it must be).
pub unsafe fn text<'a>(d: pg_sys::Datum) -> &'a [u8] {
    let t = pg_sys::pg_detoast_datum_packed(d.cast_mut_ptr());
    let len = pgrx::varlena::varsize_any_exhdr(t);
    std::slice::from_raw_parts(pgrx::varlena::vardata_any(t) as *const u8, len)
}

/// SQL functions themselves, for `DirectFunctionCall*` (pgrx's bindings wrap them in Rust
/// functions, which the function manager cannot call).
pub mod sql_fn {
    use pgrx::pg_sys::{Datum, FunctionCallInfo};
    unsafe extern "C-unwind" {
        pub fn hashtext(fcinfo: FunctionCallInfo) -> Datum;
        pub fn pg_try_advisory_xact_lock_int4(fcinfo: FunctionCallInfo) -> Datum;
        pub fn pg_advisory_xact_lock_shared_int4(fcinfo: FunctionCallInfo) -> Datum;
        pub fn regprocedurein(fcinfo: FunctionCallInfo) -> Datum;
        pub fn nextval_oid(fcinfo: FunctionCallInfo) -> Datum;
        pub fn pg_sequence_last_value(fcinfo: FunctionCallInfo) -> Datum;
        pub fn jsonb_in(fcinfo: FunctionCallInfo) -> Datum;
    }
}

/// `pg_sequence_last_value(seq)`: the last value sequence `seq` handed out to any session,
/// read outside any snapshot; None before its first.
pub unsafe fn sequence_last_value(seq: pg_sys::Oid) -> Option<i64> {
    let size = std::mem::size_of::<pg_sys::FunctionCallInfoBaseData>() + std::mem::size_of::<pg_sys::NullableDatum>();
    let fcinfo = pg_sys::palloc0(size) as pg_sys::FunctionCallInfo;
    (*fcinfo).nargs = 1;
    (*fcinfo).args.as_mut_slice(1)[0] = pg_sys::NullableDatum { value: pg_sys::Datum::from(seq), isnull: false };
    let last = sql_fn::pg_sequence_last_value(fcinfo);
    let got = (!(*fcinfo).isnull).then(|| last.value() as i64);
    pg_sys::pfree(fcinfo.cast());
    got
}

/// A text datum of `bytes`.
pub unsafe fn text_datum(bytes: &[u8]) -> pg_sys::Datum {
    pg_sys::Datum::from(pg_sys::cstring_to_text_with_len(bytes.as_ptr().cast(), bytes.len() as i32))
}

/// hashtext(t) under the database's default collation, as SQL's `hashtext(text)` computes it
/// (the advisory locks of src/slots.rs, jobq.ready's `queue_hash`).
pub unsafe fn hashtext(t: pg_sys::Datum) -> pg_sys::Datum {
    pg_sys::DirectFunctionCall1Coll(Some(sql_fn::hashtext), pg_sys::DEFAULT_COLLATION_OID, t)
}
