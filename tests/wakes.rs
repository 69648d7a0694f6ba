//! Who sends the NOTIFY of an enqueue (src/wakes.rs): the background worker right after the
//! commit by default (`jobq.notify = deferred`), the enqueuing transaction with `immediate`, and
//! the enqueuing transaction again wherever no background worker serves the database.
mod common;

use common::*;
use postgres::fallible_iterator::FallibleIterator;
use postgres::Client;
use std::time::Duration;

const PATIENCE: Duration = Duration::from_secs(30);

/// Notifications on channel jobq until one with payload `until` (sent by `marker`): each as
/// (payload, sender pid).
fn notes_until(listener: &mut Client, marker: &mut Client, until: &str) -> Vec<(String, i32)> {
    marker.batch_execute(&format!("NOTIFY jobq, '{until}'")).unwrap();
    collect_until(listener, until, PATIENCE)
}

fn pid(c: &mut Client) -> i32 {
    c.query_one("SELECT pg_backend_pid()", &[]).unwrap().get(0)
}

#[test]
fn deferred_wake_ups_come_from_the_background_worker_after_the_commit() {
    let cluster = Cluster::start("wakes", &["jobq.database = 'wakedb'"]);
    let mut admin = cluster.connect("postgres");
    admin.batch_execute("CREATE DATABASE wakedb").unwrap();
    admin.batch_execute("CREATE DATABASE unserved").unwrap();
    let mut p = cluster.connect("wakedb");
    p.batch_execute("CREATE EXTENSION jobq; SET jobq.notify = deferred").unwrap();
    // A reaper serves a database once jobq is created there.
    wait_until("the reaper to serve wakedb", PATIENCE, || cluster.log().contains("jobq reaper: serving database \"wakedb\""));
    let reaper = cluster.pids_of("jobq reaper")[0];
    let mut listener = cluster.connect("wakedb");
    listener.batch_execute("LISTEN jobq").unwrap();
    let mut marker = cluster.connect("wakedb");

    // One transaction: three due jobs in 'mail', a batch in 'sms', a future job in 'later';
    // another that rolls back, in 'ghost'. One wake-up per queue with a due job, from the
    // background worker, none for the rest.
    p.batch_execute(
        "BEGIN;
         SELECT jobq_enqueue('mail'); SELECT jobq_enqueue('mail'); SELECT jobq_enqueue('mail');
         SELECT jobq_enqueue_batch('sms', ARRAY['{}'::jsonb, '{}'::jsonb]);
         SELECT jobq_enqueue('later', run_at => now() + interval '1 hour');
         COMMIT;
         BEGIN; SELECT jobq_enqueue('ghost'); ROLLBACK;",
    )
    .unwrap();
    // Deferred wake-ups come after their commit, so await them before the marker.
    let mut got = Vec::new();
    {
        let mut n = listener.notifications();
        let mut it = n.timeout_iter(PATIENCE);
        while got.len() < 2 {
            let note = it.next().unwrap().expect("the wake-ups of mail and sms");
            got.push((note.payload().to_string(), note.process_id()));
        }
    }
    got.extend(notes_until(&mut listener, &mut marker, "end-1"));
    got.sort();
    assert_eq!(got, [("mail".to_string(), reaper), ("sms".to_string(), reaper)]);

    // Not before the commit: an open transaction's enqueue wakes nobody yet, though the
    // background worker sent a later, committed one ('probe'): it sends everything noted at once.
    p.batch_execute("BEGIN; SELECT jobq_enqueue('open')").unwrap();
    marker.batch_execute("SET jobq.notify = deferred; SELECT jobq_enqueue('probe')").unwrap();
    assert!(collect_until(&mut listener, "probe", PATIENCE).is_empty(), "no wake-up before the commit");
    p.batch_execute("COMMIT").unwrap();
    let note = listener.notifications().timeout_iter(PATIENCE).next().unwrap().expect("the wake-up of 'open'");
    assert_eq!((note.payload(), note.process_id()), ("open", reaper));

    // The default is deferred: the background worker notifies.
    p.batch_execute("RESET jobq.notify").unwrap();
    p.batch_execute("SELECT jobq_enqueue('default')").unwrap();
    let note = listener.notifications().timeout_iter(PATIENCE).next().unwrap().expect("the wake-up of 'default'");
    assert_eq!((note.payload(), note.process_id()), ("default", reaper));
    assert_eq!(notes_until(&mut listener, &mut marker, "end-2"), []);

    // immediate: the enqueuing transaction notifies, in its commit.
    p.batch_execute("SET jobq.notify = immediate").unwrap();
    let me = pid(&mut p);
    p.batch_execute("SELECT jobq_enqueue('now')").unwrap();
    assert_eq!(notes_until(&mut listener, &mut marker, "end-3"), [("now".to_string(), me)]);

    // A database no background worker serves: deferred falls back to the enqueuing transaction.
    let mut u = cluster.connect("unserved");
    u.batch_execute("CREATE EXTENSION jobq; SET jobq.notify = deferred").unwrap();
    let mut ul = cluster.connect("unserved");
    ul.batch_execute("LISTEN jobq").unwrap();
    let mut um = cluster.connect("unserved");
    let me = pid(&mut u);
    u.batch_execute("SELECT jobq_enqueue('here')").unwrap();
    assert_eq!(notes_until(&mut ul, &mut um, "end-4"), [("here".to_string(), me)]);

    // Settings are checked: an unknown value is refused.
    let e = p.batch_execute("SET jobq.notify = 'later'").unwrap_err();
    assert_eq!(sqlstate(&e), "22023");
    cluster.pg_ctl_stop("fast");
}
