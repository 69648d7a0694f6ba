//! Every database (the contract, Background worker): with jobq.database unset, the background workers
//! serve each database where jobq is installed, within 10 seconds of its CREATE EXTENSION,
//! leave after DROP EXTENSION, never block DROP DATABASE or CREATE DATABASE … TEMPLATE, and
//! serve at most jobq.max_databases at once, naming the others in one log line.
mod common;

use common::*;
use postgres::Client;
use std::time::Duration;
use uuid::Uuid;

/// The contract: "A database where CREATE EXTENSION jobq has run is served within 10 seconds".
const SERVED_WITHIN: Duration = Duration::from_secs(10);
const PATIENCE: Duration = Duration::from_secs(30);

fn reapers_in(admin: &mut Client, db: &str) -> i64 {
    admin
        .query_one("SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'jobq reaper' AND datname = $1", &[&db])
        .unwrap()
        .get(0)
}

/// A worker that checks out a job and falls silent: the background worker of `db`, and
/// nothing else (no client calls jobq_reap), puts the job back.
fn reaped_by_the_background_worker(cluster: &Cluster, db: &str) {
    let mut c = cluster.connect(db);
    // Registered last: its short life (the cluster's heartbeat timeout) has only the checkout
    // to cover.
    let job: i64 = c.query_one("SELECT jobq_enqueue('q')", &[]).unwrap().get(0);
    let w: Uuid = register(&mut c);
    let got: i64 = c.query_one("SELECT id FROM jobq_checkout($1)", &[&w]).unwrap().get(0);
    assert_eq!(got, job);
    wait_until(&format!("the background worker of {db} to requeue the job"), PATIENCE, || {
        c.query_one("SELECT state = 'ready' AND interrupted_at IS NOT NULL FROM jobq.jobs WHERE id = $1", &[&job]).unwrap().get(0)
    });
}

/// DROP EXTENSION while the reaper passes every 10 ms: each of the reaper's transactions that
/// uses jobq's objects holds the extension (src/bgworker.rs, hold_extension), so the drop waits
/// for the pass in progress, and the reaper then finds the extension gone and leaves with its
/// log line. Before, a drop committing between a tick's look and its pass made the pass fail on
/// the missing schema and the reaper exit with an ERROR (about one drop in five at this
/// interval), to be restarted by the launcher and leave without a word.
#[test]
fn drop_extension_never_catches_a_reaper_mid_pass() {
    const ROUNDS: usize = 15;
    let cluster = Cluster::start("dropmidpass", &["jobq.reap_interval = '10ms'"]);
    let mut admin = cluster.connect("postgres");
    admin.batch_execute("CREATE DATABASE x").unwrap();
    let mut x = cluster.connect("x");
    let count = |what: &str| cluster.log().matches(what).count();
    for round in 1..=ROUNDS {
        x.batch_execute("CREATE EXTENSION jobq").unwrap();
        wait_until("the reaper of x to serve it", SERVED_WITHIN, || count("jobq reaper: serving database \"x\"") == round);
        x.batch_execute("DROP EXTENSION jobq").unwrap();
        wait_until("the reaper of x to leave", PATIENCE, || reapers_in(&mut admin, "x") == 0);
        assert_eq!(count("jobq reaper: extension jobq was dropped from \"x\"; leaving"), round, "round {round}: the reaper left without saying why");
    }
    let log = cluster.log();
    assert!(!log.contains("ERROR"), "a reaper failed on the dropped extension:\n{log}");
    assert!(!log.contains("exited with exit code 1"), "a reaper exited with an error:\n{log}");
}

#[test]
fn every_database_with_jobq_is_served_and_only_those() {
    let cluster = Cluster::start("everydb", &["jobq.reap_interval = '200ms'", "jobq.heartbeat_timeout = '1s'"]);
    let mut admin = cluster.connect("postgres");
    for db in ["a", "b", "c", "plain"] {
        admin.batch_execute(&format!("CREATE DATABASE {db}")).unwrap();
    }
    // Three databases with jobq: each served within 10 s of its CREATE EXTENSION.
    for db in ["a", "b", "c"] {
        cluster.connect(db).batch_execute("CREATE EXTENSION jobq").unwrap();
        wait_until(&format!("a reaper in {db}"), SERVED_WITHIN, || reapers_in(&mut admin, db) == 1);
    }
    for db in ["a", "b", "c"] {
        reaped_by_the_background_worker(&cluster, db);
    }
    // A database without jobq was probed and left: it gets a reaper only once jobq is created.
    wait_until("the probe of plain to leave", PATIENCE, || reapers_in(&mut admin, "plain") == 0);
    cluster.connect("plain").batch_execute("CREATE EXTENSION jobq").unwrap();
    wait_until("a reaper in plain", SERVED_WITHIN, || reapers_in(&mut admin, "plain") == 1);
    reaped_by_the_background_worker(&cluster, "plain");

    // DROP EXTENSION: the reaper leaves and the database is not visited again: another
    // database created and served afterwards shows the launcher went round meanwhile.
    cluster.connect("b").batch_execute("DROP EXTENSION jobq").unwrap();
    wait_until("the reaper of b to leave", PATIENCE, || reapers_in(&mut admin, "b") == 0);
    assert!(cluster.log().contains("jobq reaper: extension jobq was dropped from \"b\"; leaving"));
    admin.batch_execute("CREATE DATABASE d").unwrap();
    cluster.connect("d").batch_execute("CREATE EXTENSION jobq").unwrap();
    wait_until("a reaper in d", SERVED_WITHIN, || reapers_in(&mut admin, "d") == 1);
    assert_eq!(reapers_in(&mut admin, "b"), 0, "b is not visited after DROP EXTENSION");

    // A served database as a template: the reaper steps aside for CREATE DATABASE (which
    // refuses a template others are connected to), and the copy, which has jobq, is served.
    admin.batch_execute("CREATE DATABASE a_copy TEMPLATE a").unwrap();
    wait_until("a reaper in a_copy", SERVED_WITHIN, || reapers_in(&mut admin, "a_copy") == 1);
    wait_until("a reaper in a again", PATIENCE, || reapers_in(&mut admin, "a") == 1);

    // DROP DATABASE of a served database, without FORCE.
    admin.batch_execute("DROP DATABASE c").unwrap();

    // At most jobq.max_databases at once: the others are named once the served ones run.
    // Served now: a, plain, d, a_copy.
    admin.batch_execute("ALTER SYSTEM SET jobq.max_databases = 2").unwrap();
    admin.batch_execute("SELECT pg_reload_conf()").unwrap();
    admin.batch_execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE backend_type = 'jobq reaper'").unwrap();
    wait_until("the launcher to name the databases it leaves unvisited", PATIENCE, || {
        cluster.log().contains("jobq launcher: 2 databases served, jobq.max_databases reached; not visited: ")
    });
    let served: i64 = admin
        .query_one("SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'jobq reaper'", &[])
        .unwrap()
        .get(0);
    assert_eq!(served, 2);
    admin.batch_execute("ALTER SYSTEM RESET jobq.max_databases").unwrap();
    admin.batch_execute("SELECT pg_reload_conf()").unwrap();
    for db in ["a", "plain", "d", "a_copy"] {
        wait_until(&format!("a reaper in {db} again"), PATIENCE, || reapers_in(&mut admin, db) == 1);
    }
    cluster.pg_ctl_stop("fast");
}
