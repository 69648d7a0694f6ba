//! The background workers (only with `shared_preload_libraries = 'jobq'`):
//!
//! - **jobq launcher** (static, restarted by the postmaster 5 s after a crash): connects to
//!   no database. Like autovacuum's launcher, it reads `pg_database` every 500 ms and keeps one
//!   reaper running in each database where jobq is installed: every database that allows
//!   connections and is not a template, or only the one `jobq.database` names. It cannot see
//!   inside a database, so a reaper it starts in a database it knows nothing of is a probe:
//!   the reaper finds no extension there, marks the database *absent* in shared memory and
//!   leaves, and the launcher does not visit that database again until `CREATE EXTENSION jobq`
//!   there clears the mark at its commit and wakes the launcher (`jobq._serve_database()`,
//!   called by the install script). New databases are probed when they appear. At most
//!   `jobq.max_databases` reapers run at once; once they all serve, one log line names the
//!   databases left unvisited. A reaper that stops soon after its start, or that cannot be
//!   started (`max_worker_processes` reached), is started again after a backoff of 1 s, 2 s,
//!   4 s … up to a minute, with one log line per attempt; templates and databases that are
//!   half-dropped or do not allow connections are never visited (a reaper connected to a
//!   template would make `CREATE DATABASE … TEMPLATE` fail).
//! - **jobq reaper** (dynamic, one per database): every `jobq.reap_interval` runs one reap
//!   pass, `jobq._reap_pass()`, in its own short transaction, shows it in `pg_stat_activity`
//!   (`jobq reap pass`, active or idle) and reports its table statistics after it (so
//!   autovacuum sees the rows it deleted). That SQL function catches and logs the errors of a
//!   pass, so a bad pass never stops the next one. It checks the installed extension before
//!   each pass: gone (`DROP EXTENSION`), it marks the database absent and leaves; at another
//!   version than this library's (the library was upgraded, `ALTER EXTENSION jobq UPDATE` not
//!   run yet), it says so once and does nothing there until the update. Every 200 ms it
//!   raises the claim floors of its database (`src/floors.rs`) and checks whether someone
//!   waits to lock its database exclusively (`DROP DATABASE`, `ALTER DATABASE … RENAME`), and
//!   then leaves, as autovacuum does, so that such a command is never blocked by it. Woken
//!   through its latch by the commits of enqueues with `jobq.notify = deferred`, it sends
//!   their NOTIFYs (`src/wakes.rs`); woken so by a checkout whose walk of the turns passed many
//!   keys with no waiting job, it prunes the turns at once (`jobq._prune_fairness`, at most
//!   every 100 ms; src/fairness.rs says why). After each pass it compacts the hot tables when a held
//!   horizon has filled them with dead versions (`jobq._compact_pass(missed)`, src/compact.rs).
//!
//! Both re-read the configuration on SIGHUP, exit promptly on SIGTERM (with code 1, so a
//! `pg_terminate_backend()` does not unregister them for good), start only once the server
//! is out of recovery (a hot standby runs neither until it is promoted) and check
//! `RecoveryInProgress()` on every tick anyway.
use crate::xact::Notes;
use crate::{floors, gucs, wakes};
use pgrx::bgworkers::*;
use pgrx::prelude::*;
use pgrx::{pg_shmem_init, PGRXSharedMemory, PgLwLock, PgMemoryContexts};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

const RESTART_AFTER: Duration = Duration::from_secs(5);
/// How often the launcher looks at the databases and at its reapers.
const LAUNCHER_TICK: Duration = Duration::from_millis(500);
/// A reaper that ran this long before it stopped was not crash-looping: no backoff.
const STABLE: Duration = Duration::from_secs(60);
/// How often the reaper raises the claim floors (src/floors.rs): a checkout walks the dead
/// entries of at most this long's claims.
const FLOOR_TICK: Duration = Duration::from_millis(200);
/// The least time between two sends of deferred wake-ups (src/wakes.rs): at most this much is
/// added to a wake-up's delay, and only when one was sent just before; a stream of enqueues
/// then costs at most one NOTIFY transaction (and its commit's flush) per gap, not one each.
const SEND_GAP: Duration = Duration::from_millis(2);
/// The prune of the turns a checkout asked for (src/wakes.rs, ask_prune): the pass's last step
/// alone (src/sql/fairness.sql), its errors logged and the reaper kept, as `jobq._reap_pass` does.
const PRUNE: &str = "DO $$ BEGIN PERFORM jobq._prune_fairness(); EXCEPTION WHEN OTHERS THEN
    RAISE WARNING 'jobq reaper: prune of the turns failed: % (SQLSTATE %)', SQLERRM, SQLSTATE; END $$";
/// The version of the SQL this library serves; a database at another one waits for
/// `ALTER EXTENSION jobq UPDATE`.
const VERSION: &str = env!("CARGO_PKG_VERSION");

/// What the reapers tell the launcher about their databases, in shared memory.
const MARKS: usize = 1024;
const ABSENT: u8 = 1; // no extension jobq there: not visited until CREATE EXTENSION
const SERVING: u8 = 2; // a reaper found jobq there and serves it

#[derive(Copy, Clone)]
struct Mark {
    db: u32, // 0: free
    state: u8,
}

#[derive(Copy, Clone)]
struct Registry {
    launcher_latch: usize, // the launcher's latch (0 until it runs)
    marks: [Mark; MARKS],
}
unsafe impl PGRXSharedMemory for Registry {}

static REGISTRY: PgLwLock<Registry> = unsafe { PgLwLock::new(c"jobq_launcher") };
static ENABLED: AtomicBool = AtomicBool::new(false);

thread_local! {
    /// Set by `jobq._serve_database()`: at commit, this database is no longer absent and the
    /// launcher is woken (src/xact.rs). At commit, not at once: a reaper started earlier
    /// would not see the extension yet.
    pub(crate) static PENDING: Notes<()> = const { Notes::new() };
}

fn mark_of(r: &Registry, db: u32) -> u8 {
    r.marks.iter().find(|m| m.db == db).map_or(0, |m| m.state)
}

/// Sets (state > 0) or clears (0) the mark of `db`. A full table keeps no mark: the launcher
/// then probes that database again after a backoff.
fn set_mark(db: u32, state: u8) {
    let mut r = REGISTRY.exclusive();
    if let Some(m) = r.marks.iter_mut().find(|m| m.db == db) {
        *m = if state == 0 { Mark { db: 0, state: 0 } } else { Mark { db, state } };
    } else if state != 0 {
        if let Some(m) = r.marks.iter_mut().find(|m| m.db == 0) {
            *m = Mark { db, state };
        }
    }
}

/// At the commit of a transaction that called `jobq._serve_database()`.
pub(crate) fn post_serve() {
    let db = crate::my_db();
    let latch = {
        let mut r = REGISTRY.exclusive();
        if let Some(m) = r.marks.iter_mut().find(|m| m.db == db && m.state == ABSENT) {
            *m = Mark { db: 0, state: 0 };
        }
        r.launcher_latch
    };
    if latch != 0 {
        unsafe { pg_sys::SetLatch(latch as *mut pg_sys::Latch) };
    }
}

/// Exponential backoff for (re)starting a reaper: 1 s, 2 s, 4 s … 60 s.
#[derive(Default)]
struct Backoff {
    failures: u32,
    until: Option<Instant>,
}

impl Backoff {
    fn waiting(&self) -> bool {
        self.until.is_some_and(|t| Instant::now() < t)
    }
    /// Records a failure; returns the delay before the next attempt.
    fn failed(&mut self) -> Duration {
        let delay = Duration::from_secs(1 << self.failures.min(6)).min(Duration::from_secs(60));
        self.failures += 1;
        self.until = Some(Instant::now() + delay);
        delay
    }
    fn reset(&mut self) {
        *self = Backoff::default();
    }
}

/// Called from _PG_init while preloading.
pub fn init() {
    pg_shmem_init!(REGISTRY = Registry { launcher_latch: 0, marks: [Mark { db: 0, state: 0 }; MARKS] });
    ENABLED.store(true, Ordering::Relaxed);
    BackgroundWorkerBuilder::new("jobq launcher")
        .set_type("jobq launcher")
        .set_function("jobq_launcher_main")
        .set_library("jobq")
        .enable_spi_access() // also: start only after recovery finished
        .set_restart_time(Some(RESTART_AFTER))
        .load();
}

/// `jobq.database`, or None: every database.
fn restriction() -> Option<String> {
    gucs::DATABASE.get().and_then(|c| c.into_string().ok()).filter(|s| !s.is_empty())
}

fn reload_config_on_sighup() {
    if BackgroundWorker::sighup_received() {
        unsafe { pg_sys::ProcessConfigFile(pg_sys::GucContext::PGC_SIGHUP) };
    }
}

fn start_reaper(db: pg_sys::Oid, name: &str) -> Option<DynamicBackgroundWorker> {
    let builder = BackgroundWorkerBuilder::new(&format!("jobq reaper {name}"))
        .set_type("jobq reaper")
        .set_function("jobq_reaper_main")
        .set_library("jobq")
        .enable_spi_access()
        .set_argument(Some(pg_sys::Datum::from(u32::from(db))))
        .set_extra(name)
        .set_notify_pid(unsafe { pg_sys::MyProcPid });
    // The handle must outlive every transaction: allocate it in TopMemoryContext.
    let started = unsafe { PgMemoryContexts::TopMemoryContext.switch_to(|_| builder.load_dynamic()) };
    started.ok()
}

/// One row of pg_database, as the launcher needs it.
struct Database {
    oid: pg_sys::Oid,
    name: String,
    allows_connections: bool,
    template: bool,
    half_dropped: bool, // datconnlimit = -2: a DROP DATABASE was interrupted
}

/// pg_database, by a plain heap scan (as the autovacuum launcher does): a worker connected
/// to no database cannot use the catalog indexes.
fn databases() -> Vec<Database> {
    let mut all = Vec::new();
    unsafe {
        let rel = pg_sys::table_open(pg_sys::DatabaseRelationId, pg_sys::AccessShareLock as _);
        let scan = pg_sys::table_beginscan_catalog(rel, 0, std::ptr::null_mut());
        loop {
            let tuple = pg_sys::heap_getnext(scan, pg_sys::ScanDirection::ForwardScanDirection);
            if tuple.is_null() {
                break;
            }
            let db = &*pg_sys::heap_tuple_get_struct::<pg_sys::FormData_pg_database>(tuple);
            all.push(Database {
                oid: db.oid,
                name: std::ffi::CStr::from_ptr(db.datname.data.as_ptr()).to_string_lossy().into_owned(),
                allows_connections: db.datallowconn,
                template: db.datistemplate,
                half_dropped: db.datconnlimit == -2,
            });
        }
        pg_sys::table_endscan(scan);
        pg_sys::table_close(rel, pg_sys::AccessShareLock as _);
    }
    all
}

/// What the launcher keeps of one database it visits.
#[derive(Default)]
struct Visit {
    reaper: Option<(DynamicBackgroundWorker, Instant)>,
    backoff: Backoff,
}

#[pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn jobq_launcher_main(_arg: pg_sys::Datum) {
    BackgroundWorker::attach_signal_handlers(SignalWakeFlags::SIGHUP | SignalWakeFlags::SIGTERM);
    BackgroundWorker::connect_worker_to_spi(None, None); // shared catalogs only
    REGISTRY.exclusive().launcher_latch = unsafe { pg_sys::MyLatch } as usize;
    let only = restriction();
    let mut visits: BTreeMap<u32, Visit> = BTreeMap::new();
    // What the launcher last said about the database of jobq.database, or about the
    // databases it leaves unvisited: each said once until it changes.
    let mut said: Option<String> = None;
    fn say_once(said: &mut Option<String>, line: String) {
        if said.as_deref() != Some(line.as_str()) {
            log!("{line}");
            *said = Some(line);
        }
    }

    while BackgroundWorker::wait_latch(Some(LAUNCHER_TICK)) {
        reload_config_on_sighup();
        if unsafe { pg_sys::RecoveryInProgress() } {
            continue;
        }
        let all = BackgroundWorker::transaction(databases);
        let wanted: Vec<&Database> = match &only {
            // A half-dropped database is as good as gone.
            Some(name) => match all.iter().find(|d| &d.name == name && !d.half_dropped) {
                None => {
                    say_once(&mut said, format!("jobq launcher: database \"{name}\" (jobq.database) does not exist yet; waiting"));
                    vec![]
                }
                Some(d) if !d.allows_connections => {
                    say_once(&mut said, format!("jobq launcher: database \"{name}\" (jobq.database) does not allow connections; waiting"));
                    vec![]
                }
                Some(d) => vec![d],
            },
            None => all.iter().filter(|d| d.allows_connections && !d.template && !d.half_dropped).collect(),
        };
        // Databases gone (or no longer wanted) are forgotten; a reaper still there leaves.
        visits.retain(|oid, v| {
            let keep = wanted.iter().any(|d| d.oid.to_u32() == *oid);
            if !keep {
                if let Some((handle, _)) = v.reaper.take() {
                    handle.terminate();
                }
            }
            keep
        });
        // Marks of databases gone are dropped (the table would fill where databases come and go).
        {
            let mut r = REGISTRY.exclusive();
            for m in r.marks.iter_mut().filter(|m| m.db != 0) {
                if !all.iter().any(|d| d.oid.to_u32() == m.db) {
                    *m = Mark { db: 0, state: 0 };
                }
            }
        }
        for d in &wanted {
            let v = visits.entry(d.oid.to_u32()).or_default();
            let Some((handle, started)) = &v.reaper else { continue };
            match handle.pid() {
                Ok(_) | Err(BackgroundWorkerStatus::NotYetStarted) => {
                    if started.elapsed() >= STABLE {
                        v.backoff.reset();
                    }
                    continue;
                }
                // A probe that found no jobq, or a reaper after DROP EXTENSION: not a failure.
                // (The mark is read after the status: it is set before the reaper exits.)
                Err(_) if mark_of(&REGISTRY.share(), d.oid.to_u32()) == ABSENT => v.backoff.reset(),
                Err(_) if started.elapsed() >= STABLE => {
                    v.backoff.reset();
                    log!("jobq launcher: the reaper of \"{}\" stopped; starting it again", d.name);
                }
                Err(_) => {
                    let delay = v.backoff.failed();
                    log!(
                        "jobq launcher: the reaper of \"{}\" stopped {:.1} s after its start ({} time(s) in a row); starting it again in {} s",
                        d.name,
                        started.elapsed().as_secs_f64(),
                        v.backoff.failures,
                        delay.as_secs()
                    );
                }
            }
            v.reaper = None;
        }
        let marks = *REGISTRY.share();
        let max = gucs::MAX_DATABASES.get().max(0) as usize;
        let mut running = visits.values().filter(|v| v.reaper.is_some()).count();
        let mut unvisited = Vec::new();
        for d in &wanted {
            let v = visits.get_mut(&d.oid.to_u32()).expect("entered above");
            if v.reaper.is_some() || v.backoff.waiting() || mark_of(&marks, d.oid.to_u32()) == ABSENT {
                continue;
            }
            if running >= max {
                unvisited.push(d.name.as_str());
                continue;
            }
            match start_reaper(d.oid, &d.name) {
                Some(handle) => {
                    v.reaper = Some((handle, Instant::now()));
                    running += 1;
                }
                None => {
                    let delay = v.backoff.failed();
                    warning!(
                        "jobq launcher: could not start a reaper for \"{}\" (max_worker_processes reached?); trying again in {} s",
                        d.name,
                        delay.as_secs()
                    );
                }
            }
        }
        // Said once the running reapers all serve (not while some are still probing).
        let all_serving = visits
            .iter()
            .filter(|(_, v)| v.reaper.is_some())
            .all(|(oid, _)| mark_of(&marks, *oid) == SERVING);
        if !unvisited.is_empty() && all_serving {
            say_once(&mut said, format!(
                "jobq launcher: {running} databases served, jobq.max_databases reached; not visited: {}",
                unvisited.join(", ")
            ));
        } else if !wanted.is_empty() && unvisited.is_empty() {
            said = None;
        }
    }
    for v in visits.into_values() {
        if let Some((handle, _)) = v.reaper {
            handle.terminate();
        }
    }
    unsafe { pg_sys::proc_exit(1) };
}

/// True when another session holds, or waits for, a lock on this database that a new
/// connection would wait for: `DROP DATABASE` (and `ALTER DATABASE … RENAME` or `SET
/// TABLESPACE`), which then waits for the sessions connected to it to leave.
fn database_wanted_exclusively() -> bool {
    unsafe {
        let mut tag: pg_sys::LOCKTAG = std::mem::zeroed();
        tag.locktag_field1 = pg_sys::InvalidOid.into(); // a shared object
        tag.locktag_field2 = pg_sys::DatabaseRelationId.into();
        tag.locktag_field3 = pg_sys::MyDatabaseId.into();
        tag.locktag_type = pg_sys::LockTagType::LOCKTAG_OBJECT as u8;
        tag.locktag_lockmethodid = pg_sys::DEFAULT_LOCKMETHOD as u8;
        let mode = pg_sys::RowExclusiveLock as pg_sys::LOCKMODE;
        if pg_sys::LockAcquire(&tag, mode, false, true) == pg_sys::LockAcquireResult::LOCKACQUIRE_NOT_AVAIL {
            return true;
        }
        pg_sys::LockRelease(&tag, mode, false);
        false
    }
}

/// What a reaper finds at a tick.
enum Found {
    /// Someone waits to drop or alter the database: leave.
    Wanted,
    /// No extension jobq here (never created, or dropped).
    Absent,
    /// The extension at this version.
    Installed(String),
}

fn look() -> Found {
    if database_wanted_exclusively() {
        return Found::Wanted;
    }
    match Spi::get_one::<String>("SELECT extversion FROM pg_catalog.pg_extension WHERE extname = 'jobq'") {
        Ok(Some(v)) => Found::Installed(v),
        _ => Found::Absent,
    }
}

/// Inside a reaper's transaction that reads or writes jobq's objects (the reap pass, the floors'
/// raise, a sweep of deferred wake-ups): holds the extension against DROP EXTENSION until the
/// transaction ends, and says whether it is still installed. DROP EXTENSION (like any drop of
/// the extension) takes an AccessExclusiveLock on the extension object first, so it waits for
/// this AccessShareLock, and a transaction that got the lock sees either the whole extension or
/// none of it. Without it, a DROP EXTENSION committing between a tick's look and its pass made
/// the pass fail on a missing schema and the reaper exit with an ERROR (restarted, and leaving
/// without saying why) instead of finding the extension gone at its next look and leaving.
pub(crate) fn hold_extension() -> bool {
    unsafe {
        let ext = pg_sys::get_extension_oid(c"jobq".as_ptr(), true);
        if ext == pg_sys::InvalidOid {
            return false;
        }
        pg_sys::LockDatabaseObject(pg_sys::ExtensionRelationId, ext, 0, pg_sys::AccessShareLock as pg_sys::LOCKMODE);
        // The lock waited for any drop in progress and made the catalog caches current.
        pg_sys::get_extension_oid(c"jobq".as_ptr(), true) == ext
    }
}

/// At the reaper's exit: its database is no longer served (an absent mark stays).
#[pg_guard]
unsafe extern "C-unwind" fn unmark(_code: i32, arg: pg_sys::Datum) {
    let db = arg.value() as u32;
    if mark_of(&REGISTRY.share(), db) == SERVING {
        set_mark(db, 0);
    }
}

#[pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn jobq_reaper_main(arg: pg_sys::Datum) {
    BackgroundWorker::attach_signal_handlers(SignalWakeFlags::SIGHUP | SignalWakeFlags::SIGTERM);
    let db_oid = pg_sys::Oid::from(arg.value() as u32);
    BackgroundWorker::connect_worker_to_spi_by_oid(Some(db_oid), None);
    let database = BackgroundWorker::get_extra().to_owned();
    let db = db_oid.to_u32();
    // Every transaction of the reaper at READ COMMITTED, whatever default_transaction_isolation
    // the server, the database or a reload says: a compaction's copy must see every row
    // committed before its lock (src/sql/compact.sql), and a pass must not fail with 40001.
    unsafe {
        pg_sys::SetConfigOption(
            c"default_transaction_isolation".as_ptr(),
            c"read committed".as_ptr(),
            pg_sys::GucContext::PGC_SUSET,
            pg_sys::GucSource::PGC_S_OVERRIDE,
        );
    }
    unsafe { pg_sys::before_shmem_exit(Some(unmark), pg_sys::Datum::from(db)) };

    // Deferred wake-ups (src/wakes.rs): once this reaper serves, an enqueue's commit sets its
    // latch; the first send also notifies every queue with a due job (what was noted before).
    let mut serving: Option<bool> = None; // Some(whether it sends wake-ups) once it serves
    let mut said_version: Option<String> = None;
    let mut current = interval();
    let mut last_pass: Option<Instant> = None;
    let mut sweep = true;
    let mut last_send = Instant::now().checked_sub(SEND_GAP).unwrap_or_else(Instant::now);
    let mut compact_backoff = Backoff::default();
    let mut last_prune = Instant::now().checked_sub(wakes::PRUNE_GAP).unwrap_or_else(Instant::now);
    let tick = || interval().min(FLOOR_TICK);
    let mut last_tick = Instant::now().checked_sub(FLOOR_TICK).unwrap_or_else(Instant::now);
    // Rounded up to whole milliseconds, the unit of WaitLatch: rounded down, the last
    // fraction of a tick would spin.
    let until_tick = |last: Instant| Duration::from_millis(tick().saturating_sub(last.elapsed()).as_micros().div_ceil(1000) as u64);
    while BackgroundWorker::wait_latch(Some(until_tick(last_tick))) {
        reload_config_on_sighup();
        if interval() != current {
            current = interval();
            log!("jobq reaper: reap interval is now {} ms", current.as_millis());
        }
        if unsafe { pg_sys::RecoveryInProgress() } {
            continue;
        }
        if serving == Some(true) {
            // Each send is a transaction with its own commit to flush: under a stream of
            // enqueues (each commit sets the latch) sends are at least SEND_GAP apart, the
            // wake-ups noted meanwhile going out together.
            if let Some(wait) = SEND_GAP.checked_sub(last_send.elapsed()) {
                unsafe { pg_sys::pg_usleep(wait.as_micros() as std::ffi::c_long) };
            }
            wakes::send(std::mem::take(&mut sweep));
            last_send = Instant::now();
        }
        // A checkout's walk of the turns passed many keys with no waiting job (src/wakes.rs,
        // ask_prune): their rows go now rather than at the next pass, at most once per
        // PRUNE_GAP. Errors are logged, as a pass's.
        if serving == Some(true) && wakes::prune_asked() && last_prune.elapsed() >= wakes::PRUNE_GAP {
            last_prune = Instant::now();
            BackgroundWorker::transaction(|| hold_extension() && Spi::run(PRUNE).is_ok());
        }
        // Wake-ups set the latch often; the rest runs on its ticks.
        if last_tick.elapsed() < tick() {
            continue;
        }
        last_tick = Instant::now();
        match BackgroundWorker::transaction(look) {
            Found::Wanted => {
                log!("jobq reaper: leaving database \"{database}\": another session waits to drop or alter it");
                unsafe { pg_sys::proc_exit(0) };
            }
            Found::Absent => {
                set_mark(db, ABSENT);
                // A CREATE EXTENSION that committed after the look above but cleared no mark
                // (there was none yet) would leave the database absent for good: look again
                // now that the mark is set (one committing later clears it).
                if matches!(BackgroundWorker::transaction(look), Found::Installed(_)) {
                    set_mark(db, 0);
                    continue;
                }
                if serving.is_some() {
                    log!("jobq reaper: extension jobq was dropped from \"{database}\"; leaving");
                } else if restriction().is_some() {
                    log!("jobq reaper: extension jobq is not created in \"{database}\" yet; waiting for CREATE EXTENSION jobq");
                } else {
                    debug1!("jobq reaper: no extension jobq in \"{database}\"");
                }
                unsafe { pg_sys::proc_exit(0) };
            }
            Found::Installed(v) if v != VERSION => {
                if serving.is_none() {
                    set_mark(db, SERVING);
                }
                if said_version.as_deref() != Some(v.as_str()) {
                    log!("jobq reaper: database \"{database}\" has jobq {v}, this library is {VERSION}; leaving it alone until ALTER EXTENSION jobq UPDATE");
                    said_version = Some(v);
                }
                serving.get_or_insert(false);
                continue;
            }
            Found::Installed(_) => {
                if serving != Some(true) {
                    set_mark(db, SERVING);
                    serving = Some(wakes::serve());
                    log!("jobq reaper: serving database \"{database}\" every {:?}", current);
                }
            }
        }
        floors::raise();
        if last_pass.is_some_and(|t| t.elapsed() < current) {
            continue;
        }
        last_pass = Some(Instant::now());
        unsafe { pg_sys::pgstat_report_activity(pg_sys::BackendState::STATE_RUNNING, c"jobq reap pass".as_ptr()) };
        // Errors of the pass are caught and logged inside _reap_pass.
        BackgroundWorker::transaction(|| hold_extension() && Spi::run("SELECT jobq._reap_pass()").is_ok());
        // In a transaction of its own, as short as it can be: it may lock the hot tables. One
        // that could not (its locks not granted in time, an error) is tried again after 1 s,
        // 2 s, 4 s … up to a minute, each try waiting twice as long for the locks as the last,
        // up to half of deadlock_timeout (jobq._compact_pass): each try makes every caller wait
        // for up to that long.
        let mut compacted = false;
        if !compact_backoff.waiting() {
            let missed = compact_backoff.failures as i32;
            let outcome = BackgroundWorker::transaction(|| {
                if hold_extension() {
                    Spi::get_one_with_args::<i32>("SELECT jobq._compact_pass($1)", &[missed.into()]).ok().flatten()
                } else {
                    None
                }
            });
            compacted = outcome == Some(1);
            if outcome == Some(-1) {
                compact_backoff.failed();
            } else {
                compact_backoff.reset();
            }
        }
        unsafe {
            pg_sys::pgstat_report_activity(pg_sys::BackendState::STATE_IDLE, c"jobq reap pass".as_ptr());
            // As a backend does between transactions: the rows the pass changed reach the
            // statistics autovacuum reads (at most once a second; PostgreSQL batches them).
            pg_sys::pgstat_report_stat(false);
            // After a compaction at once: the next pass must not read the dead versions it
            // removed from statistics not yet flushed, and compact again.
            if compacted {
                pg_sys::pgstat_report_stat(true);
            }
        }
    }
    unsafe { pg_sys::proc_exit(1) };
}

/// Called by the install script: once this transaction commits, the launcher serves this
/// database (it no longer counts as absent). Returns whether a background worker will.
#[pg_schema]
pub mod jobq {
    use pgrx::prelude::*;

    #[pg_extern(volatile, name = "_serve_database")]
    pub fn serve_database() -> bool {
        if !super::ENABLED.load(std::sync::atomic::Ordering::Relaxed) {
            return false;
        }
        super::PENDING.with(|p| p.update(|p| p.push(())));
        let here = unsafe { std::ffi::CStr::from_ptr(pg_sys::get_database_name(pg_sys::MyDatabaseId)) };
        super::restriction().is_none_or(|only| only.as_bytes() == here.to_bytes())
    }

    /// Called by every heartbeat (jobq_heartbeat): nothing here, where the background worker
    /// runs the passes. The SQL edition has no background worker; its twin
    /// (src/sql/twins/bgworker.sql) runs a pass when the last one is older than
    /// jobq.reap_interval, so that the workers' heartbeats serve the database.
    #[pg_extern(volatile, name = "_pass_if_due")]
    pub fn pass_if_due() {}
}

fn interval() -> Duration {
    Duration::from_millis(gucs::REAP_INTERVAL_MS.get().max(10) as u64)
}
