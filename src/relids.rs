//! The oids of schema jobq and of its tables, indexes and sequences, as the fast paths open
//! them by name. Each backend looks a name up once and keeps its oid until an invalidation of
//! pg_class's or pg_namespace's names reaches it (a syscache callback forgets them all): the
//! moment its syscache would forget them too, so a name means here what it means to the SQL
//! (after a `DROP EXTENSION` and `CREATE EXTENSION`, or a rename).
//! Looked up at every call, the names cost a plain job's checkout and completion some 8,000
//! instructions (bench/instructions.sh, row jobq; docs/performance.md).
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::cell::{Cell, RefCell};
use std::ffi::{c_char, c_int, CStr};

thread_local! {
    /// Moved by every invalidation of the names: what was found under an earlier value is
    /// forgotten.
    static EPOCH: Cell<u64> = const { Cell::new(0) };
    static WATCHING: Cell<bool> = const { Cell::new(false) };
    /// (epoch, schema jobq's oid).
    static SCHEMA: Cell<Option<(u64, pg_sys::Oid)>> = const { Cell::new(None) };
    /// (epoch, schema, name, oid): names found, by the address of their (static) text.
    static FOUND: RefCell<Vec<(u64, pg_sys::Oid, *const c_char, pg_sys::Oid)>> = const { RefCell::new(Vec::new()) };
}

unsafe fn watch() {
    if !WATCHING.replace(true) {
        for cache in [pg_sys::SysCacheIdentifier::RELNAMENSP, pg_sys::SysCacheIdentifier::NAMESPACENAME] {
            pg_sys::CacheRegisterSyscacheCallback(cache as c_int, Some(forget), pg_sys::Datum::from(0usize));
        }
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn forget(_arg: pg_sys::Datum, _cache: c_int, _hash: u32) {
    EPOCH.set(EPOCH.get() + 1);
}

/// Schema jobq's oid; InvalidOid where there is none and `missing_ok` (otherwise the error
/// of `get_namespace_oid`).
pub unsafe fn schema(missing_ok: bool) -> pg_sys::Oid {
    watch();
    let epoch = EPOCH.get();
    if let Some((at, oid)) = SCHEMA.get() {
        if at == epoch {
            return oid;
        }
    }
    let oid = pg_sys::get_namespace_oid(c"jobq".as_ptr(), missing_ok);
    // (Kept only if no invalidation came during the lookup.)
    if oid != pg_sys::InvalidOid && EPOCH.get() == epoch {
        SCHEMA.set(Some((epoch, oid)));
    }
    oid
}

/// The oid of relation `name` of schema `nsp`; InvalidOid where there is none.
pub unsafe fn relation(nsp: pg_sys::Oid, name: &'static CStr) -> pg_sys::Oid {
    watch();
    let epoch = EPOCH.get();
    let known = FOUND.with(|found| {
        found.borrow().iter().find(|&&(at, n, text, _)| at == epoch && n == nsp && text == name.as_ptr()).map(|&(.., oid)| oid)
    });
    if let Some(oid) = known {
        return oid;
    }
    let oid = pg_sys::get_relname_relid(name.as_ptr(), nsp);
    if oid != pg_sys::InvalidOid && EPOCH.get() == epoch {
        FOUND.with(|found| {
            let mut found = found.borrow_mut();
            found.retain(|&(at, ..)| at == epoch);
            found.push((epoch, nsp, name.as_ptr(), oid));
        });
    }
    oid
}
