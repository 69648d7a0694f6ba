//! Which of jobq's seldom used tables each database has written since the server started, in
//! shared memory, so that a hot path pays nothing for a table its database never used:
//! `jobq.edges` (workflows, src/edges.rs) and `jobq.fairness` (fair checkout, src/fairness.rs).
//!
//! A statement that inserts rows into such a table notes its database as having written it (a
//! trigger of the table, before the rows commit); a hot path that finds the table without a page
//! notes the database as having left it empty, unless an insert noted it first. A database noted
//! as having left a table empty skips it; one noted as having written it, or not at all (a full
//! array, no preload), looks at the table.
use pgrx::prelude::*;
use pgrx::{pg_shmem_init, pg_sys, PGRXSharedMemory, PgLwLock};
use std::sync::atomic::{AtomicBool, Ordering};

const DATABASES: usize = 1024;

/// The tables tracked, as indexes of [`Databases::state`].
#[derive(Copy, Clone)]
pub enum Table {
    Edges = 0,
    Fairness = 1,
}
const TABLES: usize = 2;

/// What is known of one database's table since the server started.
#[derive(Copy, Clone, PartialEq, Debug)]
pub enum Known {
    Nothing,
    Empty,
    Written,
}

const NOTHING: u8 = 0;
const EMPTY: u8 = 1;
const WRITTEN: u8 = 2;

/// Databases by oid, open addressing from `oid % DATABASES`; an entry is never removed.
#[derive(Copy, Clone)]
struct Databases {
    db: [u32; DATABASES], // 0: free
    state: [[u8; TABLES]; DATABASES],
}
unsafe impl PGRXSharedMemory for Databases {}

static DBS: PgLwLock<Databases> = unsafe { PgLwLock::new(c"jobq_tables_written") };
static ENABLED: AtomicBool = AtomicBool::new(false);

/// Called from _PG_init while preloading.
pub fn init() {
    pg_shmem_init!(DBS = Databases { db: [0; DATABASES], state: [[NOTHING; TABLES]; DATABASES] });
    ENABLED.store(true, Ordering::Relaxed);
}

/// Where `db` is in `dbs`, or the free slot it would take (None when the array is full).
fn slot(dbs: &Databases, db: u32) -> Option<usize> {
    (0..DATABASES).map(|i| (db as usize + i) % DATABASES).find(|&i| dbs.db[i] == db || dbs.db[i] == 0)
}

/// What is known of `table` in database `db`.
pub fn known(db: u32, table: Table) -> Known {
    if !ENABLED.load(Ordering::Relaxed) {
        return Known::Nothing;
    }
    let dbs = DBS.share();
    match slot(&dbs, db) {
        Some(i) if dbs.db[i] == db => match dbs.state[i][table as usize] {
            WRITTEN => Known::Written,
            EMPTY => Known::Empty,
            _ => Known::Nothing,
        },
        _ => Known::Nothing,
    }
}

/// Notes that `db` wrote rows into `table` (`written`), or that a look found it without a page
/// (`!written`: only when nothing was noted yet, so an insert noted meanwhile wins).
pub fn note(db: u32, table: Table, written: bool) {
    if !ENABLED.load(Ordering::Relaxed) {
        return;
    }
    let mut dbs = DBS.exclusive();
    if let Some(i) = slot(&dbs, db) {
        let t = table as usize;
        if written || dbs.state[i][t] == NOTHING {
            dbs.db[i] = db;
            dbs.state[i][t] = if written { WRITTEN } else { EMPTY };
        }
    }
}

/// A hot path's look at `table` of this database: false at once where the database is known to
/// have left it empty since the server started; otherwise `open` opens the table (None: it is
/// not there, false) and `read` reads it when it has a page. A table found without a page is
/// noted as left empty, unless something was noted of it first. The table is closed after,
/// its lock kept to the end of the transaction.
pub unsafe fn look<T>(
    table: Table,
    open: impl FnOnce() -> Option<(pg_sys::Relation, T)>,
    read: impl FnOnce(pg_sys::Relation, T) -> bool,
) -> bool {
    let db = crate::my_db();
    let before = known(db, table);
    if before == Known::Empty {
        return false;
    }
    let Some((rel, with)) = open() else { return false };
    let pages = pg_sys::RelationGetNumberOfBlocksInFork(rel, pg_sys::ForkNumber::MAIN_FORKNUM) > 0;
    if !pages && before == Known::Nothing {
        note(db, table, false);
    }
    let found = pages && read(rel, with);
    pg_sys::table_close(rel, pg_sys::NoLock as i32);
    found
}
