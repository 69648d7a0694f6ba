//! Reading one row by primary key without a plan (src/complete.rs, src/liveness.rs): a
//! statement's executor start-up costs more than the lookup itself (README, Performance).
use pgrx::pg_sys;
use std::ffi::CStr;

/// The first row of `rel` whose column `attno` equals `key` (`eq`: the equality function of
/// its type), through its primary key, in `snapshot`; a copy. None when there is none.
pub unsafe fn fetch(
    rel: pg_sys::Relation,
    attno: i16,
    eq: u32,
    key: pg_sys::Datum,
    snapshot: pg_sys::Snapshot,
) -> Option<pg_sys::HeapTuple> {
    pg_sys::RelationGetIndexList(rel); // fills rd_pkindex
    let pk = (*rel).rd_pkindex;
    if pk == pg_sys::InvalidOid {
        return None;
    }
    let mut skey: pg_sys::ScanKeyData = std::mem::zeroed();
    pg_sys::ScanKeyInit(&mut skey, attno, pg_sys::BTEqualStrategyNumber as u16, pg_sys::Oid::from(eq), key);
    let scan = pg_sys::systable_beginscan(rel, pk, true, snapshot, 1, &mut skey);
    let t = pg_sys::systable_getnext(scan);
    let copy = (!t.is_null()).then(|| pg_sys::heap_copytuple(t));
    pg_sys::systable_endscan(scan);
    copy
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
