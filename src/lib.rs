//! jobq: a PostgreSQL job queue whose whole coordination logic lives inside the database.
//!
//! Where things live:
//! - `src/sql/*.sql`: the SQL surface (tables, `jobq_*` functions), embedded in order below.
//!   Each file is named after the concern it holds: `schema`, `grants` (queues granted per
//!   role, and the view `jobq.jobs` that filters by them), `workers`, `enqueue`,
//!   `rate_limits`, `checkout`, `finish` (complete/fail/cancel/retry), `pause`, `locks`,
//!   `schedules` (recurring jobs), `counters` (the dashboard's per-minute counts), `reap`,
//!   `compact` (the hot tables emptied by TRUNCATE under a held horizon),
//!   `stats`, `node` (scale-out: ids that name their node), `observe`.
//! - `src/gucs.rs`: the `jobq.*` settings, and the tiny functions SQL uses to read them.
//! - `src/liveness.rs`: `jobq.worker_alive()`, the one liveness rule every function uses.
//! - `src/privileges.rs`: `jobq._may_act_for()`, who may act for a worker; the grants are in
//!   `src/sql/privileges.sql`.
//! - `src/relids.rs`: the oids of jobq's schema and relations, found by name once per backend.
//! - `src/grants.rs`: the queues a limited caller may use, for the fast paths, which serve
//!   its calls inside them and hand the others to the SQL (src/sql/grants.sql).
//! - `src/schedules.rs`: when a recurring job's ticks fall (cron expressions, IANA time zones).
//! - `src/floors.rs`: claim floors, where checkout starts walking the waiting set (shared
//!   memory, lowered at commit by whoever makes a job ready, raised by the background worker).
//! - `src/wakes.rs`: the NOTIFY that wakes listening workers, sent by the enqueuing transaction
//!   or, with `jobq.notify = deferred`, by the background worker right after its commit.
//! - `src/waits.rs`: `jobq_checkout(..., wait)`: waiting checkouts in shared memory, rung at
//!   the commit of what makes their jobs available.
//! - `src/xact.rs`: the one end-of-transaction callback that publishes what floors and
//!   wake-ups noted, at COMMIT.
//! - `src/health.rs`: each served database's last reap pass, in shared memory, for `jobq.health`.
//! - `src/counters.rs`: per-queue, per-minute counts of what jobs did (enqueued, started,
//!   completed, failed, dead; wait and run time histograms), noted as jobs move, published at
//!   commit to shared memory and moved to `jobq.queue_minutes` by every reap pass.
//! - `src/edges.rs`: what a transaction finishing a job must know of the workflow edges
//!   committed after its snapshot (the completion's probe; `40001` under REPEATABLE READ).
//! - `src/compact.rs`: what makes the compaction of the hot tables under a held horizon
//!   (`jobq._compact`, src/sql/compact.sql) safe for every other transaction.
//! - `src/bgworker.rs`: the background workers: a launcher, and a reaper in every database
//!   where jobq is installed that runs the reap pass, raises the floors and sends deferred
//!   wake-ups.
use pgrx::prelude::*;

mod bgworker;
mod checkout;
mod compact;
mod complete;
mod counters;
mod edges;
mod enqueue;
mod fairness;
mod floors;
mod grants;
mod gucs;
mod health;
mod kept;
mod liveness;
mod privileges;
mod relids;
mod rows;
mod schedules;
mod slots;
mod waits;
mod wakes;
mod written;
mod xact;

::pgrx::pg_module_magic!(name, version);

/// Which jobq this is, for `jobq_version()` (src/sql/observe.sql): the installed version and
/// the edition. The SQL edition's twin (src/sql/twins/version.sql) answers `'sql'`.
#[pg_schema]
mod jobq {
    use pgrx::prelude::*;

    #[pg_extern(stable, name = "_edition")]
    pub fn edition() -> TableIterator<'static, (name!(version, Option<String>), name!(edition, String))> {
        let version = Spi::get_one::<String>("SELECT extversion::text FROM pg_catalog.pg_extension WHERE extname = 'jobq'")
            .ok()
            .flatten();
        TableIterator::once((version, "extension".to_string()))
    }
}

/// This backend's database, as the shared-memory tables key it.
pub(crate) fn my_db() -> u32 {
    unsafe { pg_sys::MyDatabaseId }.to_u32()
}

#[pg_guard]
#[allow(non_snake_case)]
pub extern "C-unwind" fn _PG_init() {
    if unsafe { pg_sys::IsBinaryUpgrade } {
        return;
    }
    let preloading = unsafe { pg_sys::process_shared_preload_libraries_in_progress };
    gucs::define(preloading);
    if preloading {
        floors::init();
        wakes::init();
        waits::init();
        health::init();
        counters::init();
        compact::init();
        written::init();
        fairness::init();
        bgworker::init();
    }
}

// The hand-written SQL, in dependency order. `bootstrap` makes schema.sql run before the
// objects pgrx generates (the settings functions in schema `jobq`), `finalize` runs last.
extension_sql_file!("sql/schema.sql", name = "schema", bootstrap);
extension_sql_file!("sql/grants.sql", name = "grants", requires = [privileges::jobq::caller]);
extension_sql_file!("sql/workers.sql", name = "workers", requires = ["grants", compact::jobq::hold_hot_tables, liveness::jobq::worker_alive, privileges::jobq::may_act_for, privileges::jobq::caller, bgworker::jobq::pass_if_due]);
extension_sql_file!("sql/enqueue.sql", name = "enqueue", requires = ["workers", counters::jobq::tally]);
extension_sql_file!("sql/locks.sql", name = "locks", requires = ["enqueue"]);
extension_sql_file!("sql/rate_limits.sql", name = "rate_limits", requires = ["locks"]);
extension_sql_file!("sql/checkout.sql", name = "checkout", requires = ["rate_limits", waits::jobq::wait_begin, waits::jobq::wait, liveness::jobq::usable_worker]);
extension_sql_file!("sql/fairness.sql", name = "fairness", requires = ["checkout", fairness::jobq::note_fairness]);
extension_sql_file!("sql/finish.sql", name = "finish", requires = ["fairness", gucs::jobq::retention_ms]);
extension_sql_file!("sql/pause.sql", name = "pause", requires = ["finish"]);
extension_sql_file!("sql/schedules.sql", name = "schedules", requires = ["pause", schedules::jobq::cron_next, schedules::jobq::cron_latest]);
extension_sql_file!("sql/counters.sql", name = "counters", requires = ["schedules", counters::jobq::take_tallies, counters::jobq::histogram_add, counters::jobq::histogram_quantile]);
extension_sql_file!("sql/reap.sql", name = "reap", requires = ["counters", health::jobq::note_pass, gucs::jobq::retention_ms, bgworker::jobq::serve_database, waits::jobq::waiting_workers]);
extension_sql_file!("sql/stats.sql", name = "stats", requires = ["reap"]);
extension_sql_file!("sql/node.sql", name = "node", requires = ["stats"]);
extension_sql_file!("sql/observe.sql", name = "observe", requires = ["node", health::jobq::last_pass, jobq::edition]);
extension_sql_file!("sql/compact.sql", name = "compact", requires = ["observe", compact::jobq::note_compaction, gucs::jobq::compact_after]);
extension_sql_file!("sql/workflows.sql", name = "workflows", requires = ["compact", edges::jobq::refuse_unseen_edges, edges::jobq::note_edges, edges::jobq::settle_unseen]);
extension_sql_file!("sql/privileges.sql", name = "privileges", requires = ["workflows"], finalize);

#[cfg(any(test, feature = "pg_test"))]
#[pg_schema]
mod tests {
    use pgrx::prelude::*;

    // These run on the cluster of `cargo pgrx test`, which does NOT preload jobq: they show
    // that everything but the background worker works without the preload. (The
    // integration tests in tests/ all run with the preload.)

    #[pg_test]
    fn settings_have_their_documented_defaults() {
        assert_eq!(Spi::get_one::<String>("SHOW jobq.heartbeat_timeout").unwrap(), Some("30s".into()));
        assert_eq!(Spi::get_one::<String>("SHOW jobq.reap_interval").unwrap(), Some("1s".into()));
        assert_eq!(Spi::get_one::<String>("SHOW jobq.retention").unwrap(), Some("1d".into()));
    }

    #[pg_test]
    fn the_lifecycle_works_without_the_preload() {
        let w = Spi::get_one::<pgrx::Uuid>("SELECT jobq_register_worker()").unwrap().unwrap();
        let id = Spi::get_one::<i64>("SELECT jobq_enqueue('q', '{\"a\": 1}')").unwrap().unwrap();
        let got = Spi::get_one_with_args::<i64>("SELECT id FROM jobq_checkout($1)", &[w.into()]).unwrap();
        assert_eq!(got, Some(id));
        let ok = Spi::get_one_with_args::<bool>("SELECT jobq_complete($1, $2)", &[id.into(), w.into()]).unwrap();
        assert_eq!(ok, Some(true));
        let reaped = Spi::get_one::<i32>("SELECT workers_reaped FROM jobq_reap()").unwrap();
        assert_eq!(reaped, Some(0));
        // jobq.notify = deferred without a background worker: the enqueue notifies itself.
        Spi::run("SET jobq.notify = deferred").unwrap();
        assert!(Spi::get_one::<i64>("SELECT jobq_enqueue('q')").unwrap().is_some());
    }

    #[pg_test]
    fn a_waiting_checkout_looks_again_every_100_ms_without_the_preload() {
        let w = Spi::get_one::<pgrx::Uuid>("SELECT jobq_register_worker()").unwrap().unwrap();
        // Nothing there: it waits out its time, looking again every 100 ms, and returns nothing.
        let started = std::time::Instant::now();
        let n = Spi::get_one_with_args::<i64>("SELECT count(*) FROM jobq_checkout($1, ARRAY['empty'], 1, '300 ms')", &[w.into()]).unwrap();
        assert_eq!(n, Some(0));
        assert!(started.elapsed() >= std::time::Duration::from_millis(300), "{:?}", started.elapsed());
        // A job there: taken at the first look.
        let id = Spi::get_one::<i64>("SELECT jobq_enqueue('w')").unwrap().unwrap();
        let got = Spi::get_one_with_args::<i64>("SELECT id FROM jobq_checkout($1, ARRAY['w'], 1, '5 s')", &[w.into()]).unwrap();
        assert_eq!(got, Some(id));
    }

    #[pg_test]
    fn liveness_follows_the_heartbeat_timeout() {
        Spi::run("SET jobq.heartbeat_timeout = '1500ms'").unwrap();
        let alive = |age: &str| {
            Spi::get_one::<bool>(&format!("SELECT jobq.worker_alive(clock_timestamp() - interval '{age}', NULL, NULL)"))
                .unwrap()
                .unwrap()
        };
        assert!(alive("1 second"));
        assert!(!alive("2 seconds"));
        // Bound to this very session: alive; to a pid that exists with another start time,
        // or to a pid that does not exist: dead.
        let own = "(SELECT pid, backend_start FROM pg_stat_get_activity(pg_backend_pid()))";
        let q = |pid: &str, start: &str| {
            Spi::get_one::<bool>(&format!("SELECT jobq.worker_alive(clock_timestamp(), {pid}, {start}) FROM {own} s")).unwrap().unwrap()
        };
        assert!(q("s.pid", "s.backend_start"));
        assert!(!q("s.pid", "s.backend_start - interval '1 second'"));
        assert!(!q("-1", "s.backend_start"));
    }
}

/// Required by `cargo pgrx test`.
#[cfg(test)]
pub mod pg_test {
    pub fn setup(_options: Vec<&str>) {}

    #[must_use]
    pub fn postgresql_conf_options() -> Vec<&'static str> {
        vec![]
    }
}
