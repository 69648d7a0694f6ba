//! Concurrency slots taken and given back without a plan, for the Rust paths of checkout and
//! completion (src/checkout.rs, src/complete.rs).
//!
//! A slot is a row of `jobq.slots` (ns, key, slot, job_id), its number 1..limit, its primary
//! key (ns, key, slot) what keeps a key's jobs within its limit. The SQL takes one in
//! `jobq._take_slot` (src/sql/checkout.sql) and gives it back in `jobq._release_keys`
//! (src/sql/workers.sql); both paths take the same rows under the same advisory lock, so they
//! serve one queue side by side. Counted with bench/instructions.sh, the SQL's take and release
//! (a kept SPI call into PL/pgSQL, three statements) were 300,000 instructions of a keyed job's
//! 767,000; here they bring keyed checkout to 0.85-0.89 of plain (docs/performance.md, Keys).
//!
//! The take never waits, as the SQL's: the slots of the key are read once with a dirty snapshot
//! (committed rows, and rows other transactions are inserting or deleting, all count as held);
//! of the others, from the highest down, the first whose advisory lock is free is looked at
//! again under that lock (a taker that held it may have committed its row since) and chosen;
//! a job inserts its slots' rows once it has chosen every slot it needs, so a job that cannot
//! start leaves no row to take back (the advisory locks stay to the end of the transaction,
//! as the SQL's do).
//! Where the SQL gives up for this call when a row committed since its snapshot holds the slot
//! it chose, this looks at the next lower one: either way a key never has more rows than
//! numbers, which is the guarantee.
use crate::rows::{attr, column, text_datum, tupdesc_attr, IndexEntries};
use pgrx::pg_sys;
use std::ptr::null_mut;

/// jobq.slots, opened for writing until the end of the transaction.
pub struct Slots {
    rel: pg_sys::Relation,
    pk: pg_sys::Relation,
    entries: Option<IndexEntries>,
}

/// The advisory lock class of slot takers (0x6a6f6271, 'jobq'), as in jobq._take_slot, and of
/// the takers of a queue's turns (src/fairness.rs, jobq._fair_keys).
pub const CLASS: i32 = 1785684593;

impl Slots {
    /// None when jobq.slots is not (ns "char", key text, slot integer, job_id bigint) with
    /// that primary key (then the SQL serves).
    pub unsafe fn open() -> Option<Slots> {
        let nsp = crate::relids::schema(false);
        let id = crate::relids::relation(nsp, c"slots");
        if id == pg_sys::InvalidOid {
            return None;
        }
        let rel = pg_sys::table_open(id, pg_sys::RowExclusiveLock as i32);
        let desc = (*rel).rd_att;
        let types = [pg_sys::CHAROID, pg_sys::TEXTOID, pg_sys::INT4OID, pg_sys::INT8OID];
        let names = ["ns", "key", "slot", "job_id"];
        let ok = (*desc).natts == 4
            && (*rel).trigdesc.is_null()
            && names.iter().enumerate().all(|(i, n)| column(desc, n) == Some(i) && (*tupdesc_attr(desc, i)).atttypid == types[i]);
        pg_sys::RelationGetIndexList(rel); // fills rd_pkindex
        let pk_id = (*rel).rd_pkindex;
        if !ok || pk_id == pg_sys::InvalidOid {
            pg_sys::table_close(rel, pg_sys::NoLock as i32);
            return None;
        }
        let pk = pg_sys::index_open(pk_id, pg_sys::AccessShareLock as i32);
        let ix = (*pk).rd_index;
        if (*ix).indnkeyatts != 3 || (*ix).indkey.values.as_slice(3) != [1, 2, 3] || !(*pk).rd_indexprs.is_null() {
            pg_sys::index_close(pk, pg_sys::NoLock as i32);
            pg_sys::table_close(rel, pg_sys::NoLock as i32);
            return None;
        }
        Some(Slots { rel, pk, entries: None })
    }

    /// The locks stay until the end of the transaction, as the executor's do.
    pub unsafe fn close(self) {
        if let Some(e) = self.entries {
            e.close();
        }
        pg_sys::index_close(self.pk, pg_sys::NoLock as i32);
        pg_sys::table_close(self.rel, pg_sys::NoLock as i32);
    }

    /// Chooses the highest free slot of `key` (namespace `ns`) numbered 1..=`limit` and holds
    /// its advisory lock (module comment); None when none is free now. `insert` takes it.
    pub unsafe fn choose(&self, ns: u8, key: &[u8], limit: i32) -> Option<i32> {
        let k = text_datum(key);
        let mut dirty: pg_sys::SnapshotData = std::mem::zeroed();
        dirty.snapshot_type = pg_sys::SnapshotType::SNAPSHOT_DIRTY;
        let mut held = Vec::new();
        self.each(&mut dirty, ns, k, None, |t, _| held.extend(attr(t, (*self.rel).rd_att, 3).map(|s| s.value() as i32)));
        (1..=limit).rev().find(|&s| {
            if held.contains(&s) || !lock(ns, s, key) {
                return false;
            }
            let mut taken = false;
            self.each(&mut dirty, ns, k, Some(s), |_, _| taken = true);
            !taken
        })
    }

    /// Takes slot `slot` of `key` for `job`: its row, with its index entries.
    pub unsafe fn insert(&mut self, ns: u8, key: &[u8], slot: i32, job: i64) {
        let mut values = [pg_sys::Datum::from(ns as usize), text_datum(key), pg_sys::Datum::from(slot), pg_sys::Datum::from(job)];
        let mut nulls = [false; 4];
        let t = pg_sys::heap_form_tuple((*self.rel).rd_att, values.as_mut_ptr(), nulls.as_mut_ptr());
        pg_sys::heap_insert(self.rel, t, pg_sys::GetCurrentCommandId(true), 0, null_mut());
        let rel = self.rel;
        self.entries.get_or_insert_with(|| IndexEntries::open(rel, None)).add(t, false);
    }

    /// Gives back slot `slot` of `key` held by `job`: deletes its row, seen in `snapshot`,
    /// waiting for a transaction that holds it as a DELETE would. False when there was none.
    pub unsafe fn release(&mut self, ns: u8, key: &[u8], slot: i32, job: i64, snapshot: pg_sys::Snapshot) -> bool {
        let mut row = None;
        self.each(snapshot, ns, text_datum(key), Some(slot), |t, tid| {
            if attr(t, (*self.rel).rd_att, 4).is_some_and(|j| j.value() as i64 == job) {
                row = Some(tid);
            }
        });
        let Some(mut tid) = row else { return false };
        let mut tmfd: pg_sys::TM_FailureData = std::mem::zeroed();
        let cid = pg_sys::GetCurrentCommandId(true);
        pg_sys::heap_delete(self.rel, &mut tid, cid, null_mut(), true, &mut tmfd, false) == pg_sys::TM_Result::TM_Ok
    }


    /// Each row of (ns, key[, slot]) visible in `snapshot`, through the primary key.
    unsafe fn each(
        &self,
        snapshot: pg_sys::Snapshot,
        ns: u8,
        key: pg_sys::Datum,
        slot: Option<i32>,
        mut f: impl FnMut(pg_sys::HeapTuple, pg_sys::ItemPointerData),
    ) {
        let eq = pg_sys::BTEqualStrategyNumber as u16;
        let oid = pg_sys::Oid::from;
        let mut keys: [pg_sys::ScanKeyData; 3] = std::mem::zeroed();
        let collation = *(*self.pk).rd_indcollation.add(1);
        pg_sys::ScanKeyEntryInitialize(&mut keys[0], 0, 1, eq, pg_sys::CHAROID, pg_sys::InvalidOid, oid(pg_sys::F_CHAREQ), pg_sys::Datum::from(ns as usize));
        pg_sys::ScanKeyEntryInitialize(&mut keys[1], 0, 2, eq, pg_sys::TEXTOID, collation, oid(pg_sys::F_TEXTEQ), key);
        let n = if let Some(s) = slot {
            pg_sys::ScanKeyEntryInitialize(&mut keys[2], 0, 3, eq, pg_sys::INT4OID, pg_sys::InvalidOid, oid(pg_sys::F_INT4EQ), pg_sys::Datum::from(s));
            3
        } else {
            2
        };
        let scan = crate::rows::begin_index_scan(self.rel, self.pk, snapshot, &mut keys[..n], false);
        let ts = pg_sys::table_slot_create(self.rel, null_mut());
        while pg_sys::index_getnext_slot(scan, pg_sys::ScanDirection::ForwardScanDirection, ts) {
            let t = pg_sys::ExecFetchSlotHeapTuple(ts, false, null_mut());
            f(t, (*ts).tts_tid);
        }
        pg_sys::ExecDropSingleTupleTableSlot(ts);
        pg_sys::index_endscan(scan);
    }
}

/// jobq._take_slot's advisory lock on slot `slot` of (ns, key), tried without waiting and
/// held to the end of the transaction: pg_try_advisory_xact_lock(class,
/// hashtext(ns || slot || ':' || key)).
unsafe fn lock(ns: u8, slot: i32, key: &[u8]) -> bool {
    let mut name = format!("{}{}:", ns as char, slot).into_bytes();
    name.extend_from_slice(key);
    let hash = crate::rows::hashtext(text_datum(&name));
    let got = pg_sys::DirectFunctionCall2Coll(
        Some(crate::rows::sql_fn::pg_try_advisory_xact_lock_int4),
        pg_sys::InvalidOid,
        pg_sys::Datum::from(CLASS),
        hash,
    );
    got.value() != 0
}
