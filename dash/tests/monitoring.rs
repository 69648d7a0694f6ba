//! What a real deployment monitors, against a real PostgreSQL with jobq: one dashboard serving
//! several databases (pages under /db/<name>/, every series of /metrics labelled with its
//! database), every known queue's figures (0 when it has no job) and whether it is paused, the
//! rate keys bounded, and the health page for machines (/health.json, /healthz).

mod common;

use clap::Parser;
use common::dash::{promtool_check, sample, start, start_urls};
use common::{cluster, wait_until};
use jobq_dash::thresholds::QUEUE_WAIT;
use reqwest::StatusCode;
use std::time::Duration;

/// Waits until the background worker passes in `db` (so that its figures are green).
async fn passing(db: &str) {
    let s = cluster().connect(db, "postgres").await;
    wait_until("a recent pass of the background worker", Duration::from_secs(30), || async {
        s.query_one("SELECT coalesce(now() - last_pass_at < interval '5 seconds', false) FROM jobq.health", &[])
            .await
            .unwrap()
            .get::<_, bool>(0)
    })
    .await;
}

/// Registers a worker in `db` and completes one job of `queue`.
async fn complete_one(db: &str, queue: &str) {
    let s = cluster().connect(db, "postgres").await;
    let w: String = s.query_one("SELECT jobq_register_worker()::text", &[]).await.unwrap().get(0);
    let id: i64 = s
        .query_one("SELECT id FROM jobq_checkout($1::text::uuid, ARRAY[$2])", &[&w, &queue])
        .await
        .unwrap()
        .get(0);
    s.execute("SELECT jobq_complete($1, $2::text::uuid)", &[&id, &w]).await.unwrap();
}

#[tokio::test]
async fn one_dashboard_serves_several_databases() {
    let c = cluster();
    let (a, b) = (c.fresh_db().await, c.fresh_db().await);
    c.connect(&a, "postgres").await.batch_execute("SELECT jobq_enqueue('alpha')").await.unwrap();
    // Job 2 of b: a has no job 2.
    let beta: i64 = c.connect(&b, "postgres").await.query_one("SELECT max(jobq_enqueue('beta')) FROM generate_series(1, 2)", &[]).await.unwrap().get(0);
    let d = start_urls(&[c.url(&a, "dash_admin"), c.url(&b, "dash_reader")], &[]).await;

    // The first database at the base path, as a dashboard of one database, with a link to the
    // same page of each database.
    let home = d.ok("/").await;
    assert!(home.contains("alpha") && !home.contains("beta"), "{home}");
    assert!(home.contains(&format!("href=\"/db/{a}/\"")) && home.contains(&format!("href=\"/db/{b}/\"")), "{home}");
    assert!(d.ok("/jobs").await.contains(&format!("href=\"/db/{b}/jobs\"")));
    // The second under /db/<name>/, its links there, connected as its own role.
    let other = d.ok(&format!("/db/{b}/")).await;
    assert!(other.contains("beta") && !other.contains("alpha") && other.contains("connected as dash_reader"), "{other}");
    assert!(other.contains(&format!("/db/{b}/fragments/overview")), "{other}");
    let jobs = d.ok(&format!("/db/{b}/jobs")).await;
    assert!(jobs.contains(&format!("href=\"/db/{b}/jobs/{beta}\"")), "{jobs}");
    assert!(d.ok(&format!("/db/{b}/jobs/{beta}")).await.contains("beta"));
    assert_eq!(d.get(&format!("/db/{a}/jobs/{beta}")).await.status, StatusCode::NOT_FOUND, "job {beta} is b's");
    assert_eq!(d.get("/db/nosuch/").await.status, StatusCode::NOT_FOUND);

    // /metrics: every database, each series labelled with it, each family once.
    let m = d.ok("/metrics").await;
    for (db, q, ready) in [(&a, "alpha", 1.0), (&b, "beta", 2.0)] {
        assert_eq!(sample(&m, &format!("jobq_database_up{{database=\"{db}\"}}")), Some(1.0), "{m}");
        assert_eq!(sample(&m, &format!("jobq_queue_jobs{{database=\"{db}\",queue=\"{q}\",state=\"ready\"}}")), Some(ready), "{m}");
        assert!(m.contains(&format!("jobq_workers{{database=\"{db}\",state=\"alive\"}}")), "{m}");
    }
    assert_eq!(m.matches("# TYPE jobq_queue_jobs gauge").count(), 1);
    let unlabelled: Vec<&str> = m.lines().filter(|l| !l.starts_with('#') && !l.contains("{database=\"")).collect();
    assert!(unlabelled.is_empty(), "{unlabelled:?}");
    let (ok, said) = promtool_check(&m);
    assert!(ok && said.trim().is_empty(), "promtool check metrics: {said}\n{m}");
    // /db/<name>/metrics: that database only.
    let mb = d.ok(&format!("/db/{b}/metrics")).await;
    assert!(mb.contains(&format!("database=\"{b}\"")) && !mb.contains(&format!("database=\"{a}\"")), "{mb}");

    // Two connection strings to one database (or to databases of one name on two servers):
    // refused until one is named.
    let twice = jobq_dash::Config::try_parse_from(["jobq-dash", "--database-url", &c.url(&a, "dash_reader"), "--database-url", &c.url(&a, "dash_admin")]).unwrap();
    let err = jobq_dash::router(twice).await.expect_err("refused");
    assert!(err.contains(&format!("--database-url 1 and 2 are both named \"{a}\"")) && err.contains("dash_name=NAME"), "{err}");
    let named = start_urls(&[c.url(&a, "dash_reader"), format!("{} dash_name=a-admin", c.url(&a, "dash_admin"))], &[]).await;
    let m = named.ok("/metrics").await;
    assert_eq!(sample(&m, "jobq_queue_jobs{database=\"a-admin\",queue=\"alpha\",state=\"ready\"}"), Some(1.0), "{m}");
    assert_eq!(sample(&m, &format!("jobq_queue_jobs{{database=\"{a}\",queue=\"alpha\",state=\"ready\"}}")), Some(1.0), "{m}");
    assert!(named.ok("/db/a-admin/").await.contains("connected as dash_admin"));
}

/// A queue is exported while it is known (counted ever, with a job not yet pruned, or paused),
/// 0 when empty; whether it is paused is exported to a role that may read jobq.pauses, and a
/// paused queue's waiting jobs are no red figure then.
#[tokio::test]
async fn every_known_queue_is_exported_and_a_paused_queue_is_said() {
    let c = cluster();
    let db = c.fresh_db().await;
    let s = c.connect(&db, "postgres").await;
    s.batch_execute(
        "SELECT jobq_enqueue('emptied');
         SELECT jobq_enqueue('late', run_at => now() - interval '10 minutes');
         SELECT jobq_pause('late'); SELECT jobq_pause('idle'); SELECT jobq_pause('kinded', 'report');",
    )
    .await
    .unwrap();
    complete_one(&db, "emptied").await;
    wait_until("the totals of queue emptied", Duration::from_secs(30), || async {
        s.query_one("SELECT count(*) FROM jobq.queue_totals WHERE queue = 'emptied' AND completed = 1", &[]).await.unwrap().get::<_, i64>(0) == 1
    })
    .await;
    let d = start(&db, "dash_admin", &[]).await;
    let m = d.ok("/metrics").await;
    let v = |m: &str, name: &str, labels: &str| sample(m, &format!("{name}{{database=\"{db}\",{labels}}}"));
    for q in ["emptied", "idle", "kinded"] {
        for state in ["ready", "scheduled", "blocked", "executing", "dead"] {
            assert_eq!(v(&m, "jobq_queue_jobs", &format!("queue=\"{q}\",state=\"{state}\"")), Some(0.0), "{q} {state}:\n{m}");
        }
        assert_eq!(v(&m, "jobq_queue_oldest_ready_age_seconds", &format!("queue=\"{q}\"")), Some(0.0), "{q}:\n{m}");
    }
    assert!(v(&m, "jobq_queue_oldest_ready_age_seconds", "queue=\"late\"").unwrap() > 590.0);
    for (q, paused) in [("late", 1.0), ("idle", 1.0), ("kinded", 0.0), ("emptied", 0.0)] {
        assert_eq!(v(&m, "jobq_queue_paused", &format!("queue=\"{q}\"")), Some(paused), "{q}:\n{m}");
    }
    // The health page leaves the paused queue out, as the alert does.
    let healthz = d.get("/healthz").await.body;
    assert!(!healthz.contains(QUEUE_WAIT.alert), "{healthz}");
    // A jobq_reader reads jobq.pauses: the same, through the dashboard's usual role.
    let m = start(&db, "dash_reader", &[]).await.ok("/metrics").await;
    assert_eq!(v(&m, "jobq_queue_paused", "queue=\"late\""), Some(1.0), "{m}");
}

/// One series per rate key would be one per customer: the keys with the most starts in their
/// window are exported, the others summed under key="_other".
#[tokio::test]
async fn rate_keys_past_the_limit_are_summed_as_other() {
    let c = cluster();
    let db = c.fresh_db().await;
    let s = c.connect(&db, "postgres").await;
    s.batch_execute(
        "SELECT jobq_set_rate_limit(k, n, '1 hour') FROM (VALUES ('a', 10), ('b', 20), ('c', 30), ('d', 40)) v(k, n);
         SELECT jobq_enqueue('rated', rate_key => 'd');",
    )
    .await
    .unwrap();
    complete_one(&db, "rated").await;
    let starts: i64 = s.query_one("SELECT starts_in_window FROM jobq.rate_windows WHERE key = 'd'", &[]).await.unwrap().get(0);
    assert_eq!(starts, 1);
    let m = start(&db, "dash_reader", &["--metrics-rate-keys", "2"]).await.ok("/metrics").await;
    let v = |name: &str, key: &str| sample(&m, &format!("{name}{{database=\"{db}\",key=\"{key}\"}}"));
    // d has a start, then a by name; b and c are summed.
    for (key, starts, max) in [("d", Some(1.0), Some(40.0)), ("a", Some(0.0), Some(10.0)), ("_other", Some(0.0), Some(50.0)), ("b", None, None), ("c", None, None)] {
        assert_eq!((v("jobq_rate_window_starts", key), v("jobq_rate_window_max_starts", key)), (starts, max), "{key}:\n{m}");
    }
    assert_eq!(m.lines().filter(|l| l.starts_with("jobq_rate_window_starts{")).count(), 3, "{m}");
    let (ok, said) = promtool_check(&m);
    assert!(ok && said.trim().is_empty(), "promtool check metrics: {said}\n{m}");
}

/// /health.json says what /health says; /healthz is 200 only when every figure is green and
/// otherwise names what is not; a database that cannot be read is named too, and /metrics
/// still serves the others with jobq_database_up 0 for it.
#[tokio::test]
async fn health_for_machines_and_a_database_that_cannot_be_read() {
    let c = cluster();
    let (late, calm) = (c.fresh_db().await, c.fresh_db().await);
    c.connect(&late, "postgres").await.batch_execute("SELECT jobq_enqueue('late', run_at => now() - interval '10 minutes')").await.unwrap();
    passing(&late).await;
    passing(&calm).await;
    let d = start_urls(&[c.url(&late, "dash_reader"), c.url(&calm, "dash_reader")], &[]).await;

    let p = d.get(&format!("/db/{calm}/healthz")).await;
    assert_eq!((p.status, p.body.starts_with("ok")), (StatusCode::OK, true), "{}", p.body);
    let p = d.get("/healthz").await;
    assert_eq!(p.status, StatusCode::SERVICE_UNAVAILABLE, "{}", p.body);
    let line = p.body.lines().find(|l| l.contains(QUEUE_WAIT.alert)).unwrap_or_else(|| panic!("{}", p.body));
    assert!(line.starts_with(&format!("{late}: red: {} is 10 min (amber above 1 min, red above 5 min; alert JobqQueueBackingUp; queue=late)", QUEUE_WAIT.label)), "{line}");
    assert!(!p.body.contains(&format!("{calm}:")), "{}", p.body);

    let j: serde_json::Value = serde_json::from_str(&d.ok("/health.json").await).unwrap();
    assert_eq!(j["status"], "red", "{j:#}");
    let (first, second) = (&j["databases"][0], &j["databases"][1]);
    assert_eq!((first["database"].as_str(), first["status"].as_str()), (Some(late.as_str()), Some("red")), "{j:#}");
    assert_eq!((second["database"].as_str(), second["status"].as_str()), (Some(calm.as_str()), Some("green")), "{j:#}");
    let figures = first["figures"].as_array().unwrap();
    assert_eq!(figures.len(), jobq_dash::thresholds::ALL.len());
    let wait = figures.iter().find(|f| f["alert"] == QUEUE_WAIT.alert).unwrap();
    assert_eq!((wait["level"].as_str(), wait["about"]["queue"].as_str(), wait["what_to_do"].as_str()), (Some("red"), Some("late"), Some(QUEUE_WAIT.when_red)), "{wait:#}");
    assert!(wait["value"].as_f64().unwrap() > 590.0 && wait["unit"] == "seconds", "{wait:#}");
    assert!(first["health"]["last_pass_at"].is_string() && !first["tables"].as_array().unwrap().is_empty(), "{j:#}");
    assert!(d.ok("/health").await.contains("href=\"/health.json\""));

    // A role that loses its access after the start: that database is unreadable, the rest is
    // served.
    c.connect("postgres", "postgres").await.batch_execute("CREATE ROLE dash_gone LOGIN IN ROLE jobq_reader").await.unwrap();
    let d = start_urls(&[c.url(&calm, "dash_reader"), c.url(&late, "dash_gone")], &[]).await;
    c.connect("postgres", "postgres").await.batch_execute("REVOKE jobq_reader FROM dash_gone").await.unwrap();
    let m = d.ok("/metrics").await;
    assert_eq!(sample(&m, &format!("jobq_database_up{{database=\"{late}\"}}")), Some(0.0), "{m}");
    assert_eq!(sample(&m, &format!("jobq_database_up{{database=\"{calm}\"}}")), Some(1.0), "{m}");
    assert!(!m.contains(&format!("jobq_queue_jobs{{database=\"{late}\"")), "{m}");
    let p = d.get("/healthz").await;
    assert_eq!(p.status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(p.body.contains(&format!("{late}: unreadable: permission denied")), "{}", p.body);
    // Nothing to serve at all: the scrape fails (Prometheus' `up` is 0).
    let p = d.get(&format!("/db/{late}/metrics")).await;
    assert_eq!(p.status, StatusCode::FORBIDDEN, "{}", p.body);
    assert!(p.body.contains("permission denied"), "{}", p.body);
}
