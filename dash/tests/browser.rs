//! The dashboard as a person uses it: headless Chromium (Debian's /usr/bin/chromium) driven by
//! Playwright (dash/browser/suite.mjs, `npm ci` by scripts/setup.sh) against two dashboards
//! running in-process, one connected as a jobq_admin login role and one as a jobq_reader one.
//! This file seeds the data, starts the dashboards, runs the suite and checks in SQL what the
//! suite did (the retried job is ready, the forged retry changed nothing). A third dashboard
//! shows a database whose every name is 900 bytes long: the suite checks that each page still
//! fits a 1400 px window.
//!
//! Alone: `cargo test -p jobq-dash --test browser -- --nocapture`. The suite saves the
//! overview's screenshot to target/tmp/dash-overview.png; dash/screenshot.png, which the README
//! shows, is a copy of it made by hand.

mod common;

use clap::Parser;
use common::{cluster, wait_until};
use jobq_dash::Config;
use std::path::Path;
use std::time::Duration;

/// The queues with activity: kind, how many jobs the worker completes, and how many attempts
/// it fails (those jobs are retried in an hour: scheduled).
const QUEUES: &[(&str, &str, i64, i64)] = &[
    ("billing", "charge_card", 40, 0),
    ("mail", "send_mail", 25, 2),
    ("reports", "build_report", 8, 1),
    ("webhooks", "deliver", 60, 0),
];

struct Seeded {
    db: String,
    /// Two jobs of queue mail discarded by their worker: the admin retries the first, the
    /// reader tries to retry the second.
    dead_retried: i64,
    dead_forged: i64,
}

async fn seed() -> Seeded {
    let c = cluster();
    let db = c.fresh_db().await;
    // Counters reach jobq.queue_minutes at each reap pass: pass often. The worker below does
    // not heartbeat: it must not be found dead while the suite runs. (ALTER SYSTEM with the
    // extension, ALTER DATABASE in the SQL edition: before the sessions that read them.)
    c.set_jobq(&db, &[("reap_interval", "100ms"), ("heartbeat_timeout", "1h")]).await;
    let s = c.connect(&db, "postgres").await;
    s.batch_execute(
        "SELECT jobq_schedule('nightly-report', '30 2 * * *', 'reports', time_zone => 'Europe/Paris');
         SELECT jobq_set_rate_limit('partner-api', 100, '1 minute');",
    )
    .await
    .unwrap();
    let w: String = s
        .query_one("SELECT jobq_register_worker('browser-worker')::text", &[])
        .await
        .unwrap()
        .get(0);
    let enqueue = |queue: &'static str, kind: &'static str, payload: String| {
        let s = &s;
        async move {
            s.query_one(
                "SELECT jobq_enqueue($1, $2::text::jsonb, kind => $3)",
                &[&queue, &payload, &kind],
            )
            .await
            .unwrap()
            .get::<_, i64>(0)
        }
    };
    let checkout = |queue: &'static str, n: i32| {
        let (s, w) = (&s, &w);
        async move {
            s.query(
                "SELECT id FROM jobq_checkout($1::text::uuid, ARRAY[$2], $3)",
                &[w, &queue, &n],
            )
            .await
            .unwrap()
            .iter()
            .map(|r| r.get::<_, i64>(0))
            .collect::<Vec<_>>()
        }
    };

    // The two dead jobs, each alone in its queue when checked out.
    let mut dead = Vec::new();
    for to in ["bounce@example.com", "gone@example.com"] {
        let id = enqueue("mail", "send_mail", format!("{{\"to\": \"{to}\"}}")).await;
        assert_eq!(checkout("mail", 1).await, vec![id]);
        let st: String = s
            .query_one(
                "SELECT jobq_fail($1, $2::text::uuid, '{\"msg\": \"550 mailbox unavailable\"}', discard => true)",
                &[&id, &w],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(st, "dead");
        dead.push(id);
    }
    // Completed jobs in every queue, a few failed attempts to be retried later (scheduled), and
    // jobs left ready.
    for (i, (queue, kind, done, failed)) in QUEUES.iter().enumerate() {
        for n in 0..(done + failed + 1 + i as i64) {
            enqueue(queue, kind, format!("{{\"n\": {n}}}")).await;
        }
        let ids = checkout(queue, (done + failed) as i32).await;
        assert_eq!(ids.len() as i64, done + failed, "checkout of {queue}");
        for id in &ids[..*done as usize] {
            s.execute(
                "SELECT jobq_complete($1, $2::text::uuid, '{\"ok\": true}')",
                &[id, &w],
            )
            .await
            .unwrap();
        }
        for id in &ids[*done as usize..] {
            s.execute(
                "SELECT jobq_fail($1, $2::text::uuid, '{\"msg\": \"timeout\"}', retry_in => '1 hour')",
                &[id, &w],
            )
            .await
            .unwrap();
        }
    }
    // An executing job holding a unique key, and a lock.
    let report = s
        .query_one(
            "SELECT jobq_enqueue('reports', '{\"scope\": \"all\"}', kind => 'build_report', priority => -10, unique_key => 'report:all', concurrency_key => 'reports', concurrency_limit => 2)",
            &[],
        )
        .await
        .unwrap()
        .get::<_, i64>(0);
    assert_eq!(checkout("reports", 1).await, vec![report]);
    assert!(s
        .query_one(
            "SELECT jobq_acquire_lock('maintenance', $1::text::uuid)",
            &[&w]
        )
        .await
        .unwrap()
        .get::<_, bool>(0));

    // The background worker moves the counters into jobq.queue_minutes at its next pass.
    wait_until(
        "the counters of every queue in jobq.throughput",
        Duration::from_secs(60),
        || async {
            let rows = s
                .query(
                    "SELECT queue, sum(completed)::bigint FROM jobq.throughput(now() - interval '1 hour', '1 minute') GROUP BY queue",
                    &[],
                )
                .await
                .unwrap();
            QUEUES.iter().all(|(q, _, done, _)| {
                rows.iter()
                    .any(|r| r.get::<_, String>(0) == *q && r.get::<_, i64>(1) >= *done)
            })
        },
    )
    .await;
    Seeded {
        db,
        dead_retried: dead[0],
        dead_forged: dead[1],
    }
}

/// What the names of `LongNames` are made of: one 900-byte word (the limit is 1,000 bytes),
/// with no space or hyphen a browser could break a line at after its first hyphen.
fn long(prefix: &str) -> String {
    let mut s = format!("{prefix}-");
    while s.len() < 900 {
        s.push_str("abcdefghij");
    }
    s.truncate(900);
    s
}

/// A database whose every name is 900 bytes long: a queue with a dead, an executing and a
/// ready job of one kind, the executing one holding a unique key, a concurrency key and a rate
/// key; a lock held by a worker with a long name and metadata; a schedule.
struct LongNames {
    db: String,
    /// The executing job.
    job: i64,
    names: serde_json::Value,
}

/// The one row of `sql`.
async fn one(
    s: &tokio_postgres::Client,
    sql: &str,
    params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
) -> tokio_postgres::Row {
    s.query_one(sql, params)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

async fn seed_long_names() -> LongNames {
    let c = cluster();
    let db = c.fresh_db().await;
    // Its worker does not heartbeat either, and must not be found dead while the suite runs
    // (the SQL edition's setting is the database's: seed's does not reach this one).
    c.set_jobq(&db, &[("heartbeat_timeout", "1h")]).await;
    let s = c.connect(&db, "postgres").await;
    let [queue, kind, unique, concurrency, rate, lock, schedule, worker] = [
        "queue",
        "kind",
        "unique",
        "concurrency",
        "rate",
        "lock",
        "schedule",
        "worker",
    ]
    .map(long);
    s.execute("SELECT jobq_set_rate_limit($1, 100, '1 minute')", &[&rate])
        .await
        .unwrap();
    s.execute(
        "SELECT jobq_schedule($1, '30 2 * * *', $2, kind => $3, time_zone => 'America/Argentina/Buenos_Aires')",
        &[&schedule, &queue, &kind],
    )
    .await
    .unwrap();
    let w: String = s
        .query_one(
            "SELECT jobq_register_worker($1, jsonb_build_object('note', $2::text))::text",
            &[&worker, &long("metadata")],
        )
        .await
        .unwrap()
        .get(0);
    let checkout = "SELECT id FROM jobq_checkout($1::text::uuid, ARRAY[$2])";
    let dead: i64 = one(
        &s,
        "SELECT jobq_enqueue($1, '{}', kind => $2)",
        &[&queue, &kind],
    )
    .await
    .get(0);
    assert_eq!(
        one(&s, checkout, &[&w, &queue]).await.get::<_, i64>(0),
        dead
    );
    one(
        &s,
        "SELECT jobq_fail($1, $2::text::uuid, '{\"msg\": \"boom\"}', discard => true)",
        &[&dead, &w],
    )
    .await;
    let job: i64 = one(
        &s,
        "SELECT jobq_enqueue($1, '{}', kind => $2, unique_key => $3, concurrency_key => $4, concurrency_limit => 2, rate_key => $5)",
        &[&queue, &kind, &unique, &concurrency, &rate],
    )
    .await
    .get(0);
    assert_eq!(one(&s, checkout, &[&w, &queue]).await.get::<_, i64>(0), job);
    one(
        &s,
        "SELECT jobq_enqueue($1, '{}', kind => $2)",
        &[&queue, &kind],
    )
    .await;
    assert!(one(
        &s,
        "SELECT jobq_acquire_lock($1, $2::text::uuid)",
        &[&lock, &w]
    )
    .await
    .get::<_, bool>(0));
    LongNames {
        db,
        job,
        names: serde_json::json!({
            "queue": queue, "kind": kind, "unique": unique, "concurrency": concurrency,
            "rate": rate, "lock": lock, "schedule": schedule, "worker": worker,
        }),
    }
}

/// Starts the dashboard in-process on a free loopback port, connected as `user`; its URL.
async fn start(db: &str, user: &str) -> String {
    let url = cluster().url(db, user);
    let cfg = Config::try_parse_from(["jobq-dash", "--database-url", &url]).unwrap();
    let router = jobq_dash::router(cfg).await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    format!("http://{addr}")
}

async fn state_of(db: &str, id: i64) -> String {
    cluster()
        .connect(db, "postgres")
        .await
        .query_one("SELECT state FROM jobq.jobs WHERE id = $1", &[&id])
        .await
        .unwrap()
        .get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_in_a_browser() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let suite = dir.join("browser/suite.mjs");
    assert!(
        Path::new("/usr/bin/chromium").exists()
            && dir.join("browser/node_modules/playwright-core").exists(),
        "the browser suite needs Debian's chromium and dash/browser/node_modules: run scripts/setup.sh"
    );
    let f = seed().await;
    let admin = start(&f.db, "dash_admin").await;
    let reader = start(&f.db, "dash_reader").await;
    let l = seed_long_names().await;
    let long_names = start(&l.db, "dash_admin").await;
    let fixture = serde_json::json!({
        "admin": admin,
        "reader": reader,
        "deadRetried": f.dead_retried,
        "deadForged": f.dead_forged,
        "queues": QUEUES.iter().map(|q| q.0).collect::<Vec<_>>(),
        "queue": "mail",
        "kind": "send_mail",
        "worker": "browser-worker",
        "lock": "maintenance",
        "schedule": "nightly-report",
        "rateLimit": "partner-api",
        // Under target/, never over the tracked dash/screenshot.png (copy it there by hand to
        // refresh the README's picture).
        "screenshot": Path::new(env!("CARGO_TARGET_TMPDIR")).join("dash-overview.png"),
        "long": { "url": long_names, "job": l.job, "names": l.names },
    });
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new("node")
            .arg(&suite)
            .env("JOBQ_DASH_BROWSER_FIXTURE", fixture.to_string())
            .output()
            .expect("run node (Node 20 or later)")
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    eprintln!("{stderr}");
    assert!(
        out.status.success(),
        "the browser suite failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    // What the suite did, seen from the database.
    assert_eq!(
        state_of(&f.db, f.dead_retried).await,
        "ready",
        "the admin's retry"
    );
    assert_eq!(
        state_of(&f.db, f.dead_forged).await,
        "dead",
        "the reader's forged retry changed nothing"
    );
    let paused: i64 = cluster()
        .connect(&f.db, "postgres")
        .await
        .query_one("SELECT count(*) FROM jobq.pauses", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(paused, 0, "the reader's forged pause changed nothing");
}
