//! The dashboard's handlers against a real PostgreSQL with jobq: the app runs in-process on a
//! free loopback port, connected as a jobq_admin or a jobq_reader login role, and is driven
//! over HTTP as a browser would (cookies and form posts by hand).

mod common;

use clap::Parser;
use common::dash::{promtool_check, sample, start, Dash};
use common::{cluster, wait_until};
use jobq_dash::Config;
use reqwest::header::COOKIE;
use reqwest::StatusCode;
use std::time::Duration;

/// A test database with jobs in every interesting state, made as the superuser.
struct Fixture {
    db: String,
    /// A job of queue mail discarded by its worker: dead, with error {"msg": "boom"}.
    dead: i64,
    /// Three ready jobs of queue mail.
    ready: Vec<i64>,
    /// A job of queue reports (unique key report:all) executing under worker "test-worker".
    executing: i64,
}

async fn fixture() -> Fixture {
    let c = cluster();
    let db = c.fresh_db().await;
    let s = c.connect(&db, "postgres").await;
    let one = |sql: &'static str| {
        let s = &s;
        async move {
            s.query_one(sql, &[])
                .await
                .unwrap_or_else(|e| panic!("{sql}: {e}"))
        }
    };
    let dead: i64 = one("SELECT jobq_enqueue('mail', '{\"to\": \"dead@example.com\", \"secret\": \"s3cr3t\"}', kind => 'send_mail', priority => -10)").await.get(0);
    let mut ready = Vec::new();
    for _ in 0..3 {
        ready.push(
            one("SELECT jobq_enqueue('mail', '{\"to\": \"a@example.com\"}', kind => 'send_mail')")
                .await
                .get::<_, i64>(0),
        );
    }
    let executing: i64 = one("SELECT jobq_enqueue('reports', '{\"scope\": \"all\"}', kind => 'build_report', unique_key => 'report:all', concurrency_key => 'reports', concurrency_limit => 2)").await.get(0);
    s.batch_execute(
        "SELECT jobq_schedule('nightly-report', '30 2 * * *', 'reports', time_zone => 'Europe/Paris');
         SELECT jobq_set_rate_limit('partner-api', 100, '1 minute');",
    )
    .await
    .unwrap();
    let w: String = one("SELECT jobq_register_worker('test-worker')::text")
        .await
        .get(0);
    let row = s
        .query_one(
            "SELECT id FROM jobq_checkout($1::text::uuid, ARRAY['mail'])",
            &[&w],
        )
        .await
        .unwrap();
    assert_eq!(
        row.get::<_, i64>(0),
        dead,
        "the priority -10 job is taken first"
    );
    let st: String = s
        .query_one(
            "SELECT jobq_fail($1, $2::text::uuid, '{\"msg\": \"boom\"}', discard => true)",
            &[&dead, &w],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(st, "dead");
    let row = s
        .query_one(
            "SELECT id FROM jobq_checkout($1::text::uuid, ARRAY['reports'])",
            &[&w],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, i64>(0), executing);
    assert!(s
        .query_one(
            "SELECT jobq_acquire_lock('maintenance', $1::text::uuid)",
            &[&w]
        )
        .await
        .unwrap()
        .get::<_, bool>(0));
    Fixture {
        db,
        dead,
        ready,
        executing,
    }
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

fn link(id: i64) -> String {
    format!("/jobs/{id}\"")
}

#[tokio::test]
async fn every_page_answers_and_shows_what_it_should() {
    let f = fixture().await;
    let d = start(&f.db, "dash_admin", &[]).await;

    let home = d.ok("/").await;
    assert!(home.contains("mail") && home.contains("reports"), "{home}");
    assert!(home.contains("<svg"), "a chart on the overview");
    assert!(
        home.contains("<span class=\"badge bad\">failing</span>"),
        "queue mail has a dead job: {home}"
    );
    assert!(home.contains("connected as dash_admin"));
    let frag = d.ok("/fragments/overview").await;
    assert!(
        frag.contains("<svg") && frag.contains("mail") && !frag.contains("<nav"),
        "{frag}"
    );

    let q = d.ok("/queues/mail").await;
    assert!(q.contains("send_mail") && q.contains("Pause queue"), "{q}");
    assert!(q.contains("<svg"));

    let jobs = d.ok("/jobs").await;
    for id in f.ready.iter().chain([&f.dead, &f.executing]) {
        assert!(jobs.contains(&link(*id)), "job {id} listed");
    }
    assert!(jobs.contains("<strong>5</strong> jobs match"), "{jobs}");

    let job = d.ok(&format!("/jobs/{}", f.dead)).await;
    assert!(
        job.contains("boom") && job.contains("dead@example.com"),
        "{job}"
    );
    assert!(
        job.contains(&format!("/jobs/{}/retry", f.dead)),
        "a retry button"
    );
    assert!(
        job.contains("enqueued") && job.contains("finished"),
        "a timeline"
    );
    // Every failed attempt's error (the column errors): here the one attempt, discarded.
    assert!(
        job.contains("errors") && job.contains("&quot;attempt&quot;: 1"),
        "the errors of every attempt: {job}"
    );
    assert_eq!(d.get("/jobs/999999999").await.status, StatusCode::NOT_FOUND);

    let workers = d.ok("/workers").await;
    assert!(
        workers.contains("test-worker") && workers.contains("postgres"),
        "{workers}"
    );
    assert!(
        workers.contains("<td class=\"n\">1</td>"),
        "the worker holds one job: {workers}"
    );

    let locks = d.ok("/locks").await;
    assert!(
        locks.contains("maintenance") && locks.contains("report:all") && locks.contains("reports"),
        "{locks}"
    );
    assert!(d.ok("/schedules").await.contains("nightly-report"));
    assert!(d.ok("/rate-limits").await.contains("partner-api"));
    let health = d.ok("/health").await;
    assert!(
        health.contains("live_jobs") && health.contains("notify_queue_usage") && health.contains("Background worker: time since its last pass"),
        "{health}"
    );
}

/// Tenants (docs/tenants.md): connected as a role limited to queue mail (jobq_grant_queues), the
/// dashboard shows mail's jobs, counters and metrics only: reports' job is not found, its queue,
/// schedule and unique key are not listed, and /metrics has no series of it.
#[tokio::test]
async fn a_limited_role_sees_only_its_queues() {
    let f = fixture().await;
    let s = cluster().connect(&f.db, "postgres").await;
    let role = format!("{}_tenant", f.db);
    s.batch_execute(&format!(
        "CREATE ROLE {role} LOGIN; GRANT jobq_reader TO {role}; SELECT jobq_grant_queues('{role}', 'reader', '{{mail}}')"
    ))
    .await
    .unwrap();
    wait_until("totals of queue reports", Duration::from_secs(30), || async {
        s.query_one("SELECT count(*) FROM jobq.queue_totals WHERE queue = 'reports'", &[]).await.unwrap().get::<_, i64>(0) == 1
    })
    .await;
    let d = start(&f.db, &role, &[]).await;
    let home = d.ok("/").await;
    assert!(home.contains("mail") && !home.contains("reports"), "{home}");
    let jobs = d.ok("/jobs").await;
    assert!(jobs.contains(&link(f.dead)) && !jobs.contains(&link(f.executing)), "{jobs}");
    assert!(jobs.contains("<strong>4</strong> jobs match"), "{jobs}");
    assert_eq!(d.get(&format!("/jobs/{}", f.executing)).await.status, StatusCode::NOT_FOUND);
    assert!(!d.ok("/locks").await.contains("report:all"));
    assert!(!d.ok("/schedules").await.contains("nightly-report"));
    let m = d.ok("/metrics").await;
    assert!(m.contains("queue=\"mail\"") && !m.contains("queue=\"reports\""), "{m}");
    // The same pages as an unlimited reader show both queues.
    let r = start(&f.db, "dash_reader", &[]).await;
    assert!(r.ok("/metrics").await.contains("queue=\"reports\""));
    assert!(r.ok("/jobs").await.contains(&link(f.executing)));
}

#[tokio::test]
async fn jobs_filters_are_kept_in_the_url() {
    let f = fixture().await;
    let d = start(&f.db, "dash_reader", &[]).await;

    let dead = d.ok("/jobs?state=dead").await;
    assert!(dead.contains(&link(f.dead)));
    for id in f.ready.iter().chain([&f.executing]) {
        assert!(!dead.contains(&link(*id)), "job {id} is not dead");
    }
    assert!(dead.contains("<strong>1</strong> jobs match"));
    assert!(
        dead.contains("<option value=\"dead\" selected>"),
        "the filter stays in the form"
    );

    let by_key = d.ok("/jobs?key=report:all").await;
    assert!(by_key.contains(&link(f.executing)) && !by_key.contains(&link(f.dead)));
    let by_kind = d.ok("/jobs?queue=mail&kind=send_mail&state=ready").await;
    assert!(
        f.ready.iter().all(|id| by_kind.contains(&link(*id))) && !by_kind.contains(&link(f.dead))
    );

    let payload = d
        .ok("/jobs?payload=%7B%22to%22%3A%22dead%40example.com%22%7D")
        .await;
    assert!(
        payload.contains(&link(f.dead)) && !payload.contains(&link(f.ready[0])),
        "{payload}"
    );
    // The payload filter searches the newest --payload-window jobs only: with 1, not the dead
    // job, which is older than the newest.
    let narrow = start(&f.db, "dash_admin", &["--payload-window", "1"]).await;
    let narrow = narrow
        .ok("/jobs?payload=%7B%22to%22%3A%22dead%40example.com%22%7D")
        .await;
    assert!(
        !narrow.contains(&link(f.dead)) && narrow.contains("searches the newest 1 jobs"),
        "{narrow}"
    );
    let bad = d.ok("/jobs?payload=%7Bnot+json").await;
    assert!(bad.contains("not valid JSON"), "{bad}");
    assert_eq!(d.get("/jobs?state=sleeping").await.status, StatusCode::OK);
    assert!(d.ok("/jobs?state=sleeping").await.contains("unknown state"));

    // Keyset paging: 60 more jobs make two pages, the second starting below the first's last id.
    let s = cluster().connect(&f.db, "postgres").await;
    s.batch_execute("SELECT jobq_enqueue('bulk', '{}') FROM generate_series(1, 60)")
        .await
        .unwrap();
    let first = d.ok("/jobs?queue=bulk").await;
    assert!(first.contains("<strong>60</strong> jobs match"));
    let older = first
        .split("href=\"")
        .filter_map(|s| s.split('"').next())
        .find(|h| h.contains("before="))
        .expect("an older link")
        .replace("&amp;", "&");
    assert!(older.starts_with("/jobs?queue=bulk&before="), "{older}");
    let second = d.ok(&older).await;
    assert_eq!(
        second.matches("href=\"/jobs/").count(),
        10,
        "the 10 older jobs: {second}"
    );
}

#[tokio::test]
async fn an_admin_acts_with_a_csrf_token_only() {
    let f = fixture().await;
    let d = start(&f.db, "dash_admin", &[]).await;
    let retry = format!("/jobs/{}/retry", f.dead);

    let (status, _, _) = d.post(&retry, None, &[]).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "no cookie, no field");
    let token = d.token().await;
    let (status, _, _) = d.post(&retry, Some(&token), &[]).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "cookie without the field");
    let (status, _, _) = d.post(&retry, Some(&token), &[("csrf", "forged.00")]).await;
    assert_eq!(
        status,
        StatusCode::FORBIDDEN,
        "a field that is not the cookie"
    );
    assert_eq!(state_of(&f.db, f.dead).await, "dead", "nothing changed");

    let (status, loc, _) = d.post(&retry, Some(&token), &[("csrf", &token)]).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert_eq!(loc, format!("/jobs/{}?msg=retried", f.dead));
    assert_eq!(state_of(&f.db, f.dead).await, "ready");
    assert!(d.ok(&loc).await.contains("ready again"));

    // Pause and resume.
    let s = cluster().connect(&f.db, "postgres").await;
    let paused = || async {
        s.query_one("SELECT count(*) FROM jobq.pauses WHERE queue = 'mail'", &[])
            .await
            .unwrap()
            .get::<_, i64>(0)
    };
    let (status, _, _) = d
        .post("/queues/mail/pause", Some(&token), &[("csrf", &token)])
        .await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert_eq!(paused().await, 1);
    assert!(d.ok("/queues/mail").await.contains("Resume queue"));
    let (status, _, _) = d
        .post("/queues/mail/resume", Some(&token), &[("csrf", &token)])
        .await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert_eq!(paused().await, 0);

    // Bulk cancel of what a filter selects: a confirmation with the count, then the action.
    let confirm = d
        .ok("/jobs/bulk?queue=mail&state=ready&action=cancel")
        .await;
    assert!(
        confirm.contains("<strong>cancel 4</strong>"),
        "3 ready + the retried one: {confirm}"
    );
    let (status, _, _) = d
        .post(
            "/jobs/bulk",
            Some(&token),
            &[("action", "cancel"), ("queue", "mail"), ("state", "ready")],
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "bulk without a token");
    let (status, _, body) = d
        .post(
            "/jobs/bulk",
            Some(&token),
            &[
                ("csrf", &token),
                ("action", "cancel"),
                ("queue", "mail"),
                ("state", "ready"),
            ],
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body.contains("4 job(s) cancelled"), "{body}");
    for id in f.ready.iter().chain([&f.dead]) {
        assert_eq!(state_of(&f.db, *id).await, "cancelled");
    }
    let (status, _, body) = d
        .post(
            "/jobs/bulk",
            Some(&token),
            &[("csrf", &token), ("action", "retry"), ("queue", "mail")],
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body.contains("4 job(s) retried"), "{body}");
    assert_eq!(state_of(&f.db, f.ready[0]).await, "ready");

    // The database has the last word: without EXECUTE on jobq_retry, its 42501 is a 403 page.
    s.batch_execute("SELECT jobq_cancel(id) FROM jobq.jobs WHERE queue = 'mail';
                     REVOKE EXECUTE ON FUNCTION jobq_retry(bigint) FROM jobq_producer, jobq_worker, jobq_admin")
        .await
        .unwrap();
    let (status, _, body) = d.post(&retry, Some(&token), &[("csrf", &token)]).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert!(body.contains("42501"), "{body}");
    assert_eq!(state_of(&f.db, f.dead).await, "cancelled");
}

#[tokio::test]
async fn a_reader_sees_no_action_and_forged_ones_are_refused() {
    let f = fixture().await;
    for (user, args) in [
        ("dash_reader", &[][..]),
        ("dash_admin", &["--read-only"][..]),
    ] {
        let d = start(&f.db, user, args).await;
        let job = d.ok(&format!("/jobs/{}", f.dead)).await;
        assert!(
            !job.contains("method=\"post\""),
            "{user} {args:?}: no action form: {job}"
        );
        assert!(job.contains("read-only"));
        assert!(!d.ok("/queues/mail").await.contains("method=\"post\""));
        assert!(!d.ok("/jobs").await.contains("/jobs/bulk"), "no bulk links");
        let token = d.token().await;
        // Refused by the dashboard itself, before any call reaches the database.
        for (path, form) in [
            (
                format!("/jobs/{}/retry", f.dead),
                vec![("csrf", token.as_str())],
            ),
            (
                "/queues/mail/pause".to_string(),
                vec![("csrf", token.as_str())],
            ),
            (
                "/jobs/bulk".to_string(),
                vec![("csrf", token.as_str()), ("action", "retry")],
            ),
        ] {
            let (status, _, body) = d.post(&path, Some(&token), &form).await;
            assert_eq!(status, StatusCode::FORBIDDEN, "{user} {path}: {body}");
            assert!(
                body.contains("actions are disabled") && !body.contains("42501"),
                "{user} {path}: {body}"
            );
        }
        assert_eq!(state_of(&f.db, f.dead).await, "dead", "nothing changed");
    }
    // And the database refuses a reader by itself.
    let r = cluster().connect(&f.db, "dash_reader").await;
    let e = r
        .query_one("SELECT jobq_retry($1)", &[&f.dead])
        .await
        .unwrap_err();
    assert_eq!(e.code().unwrap().code(), "42501");
}

#[tokio::test]
async fn hidden_payloads_are_never_shown() {
    let f = fixture().await;
    let d = start(&f.db, "dash_admin", &["--hide-payloads"]).await;
    let job = d.ok(&format!("/jobs/{}", f.dead)).await;
    assert!(
        !job.contains("s3cr3t") && !job.contains("dead@example.com") && !job.contains("boom"),
        "{job}"
    );
    assert!(job.contains("hidden"));
    let jobs = d.ok("/jobs").await;
    assert!(!jobs.contains("boom") && !jobs.contains("name=\"payload\""));
    assert!(d
        .ok("/jobs?payload=%7B%7D")
        .await
        .contains("payloads are hidden"));
}

#[tokio::test]
async fn basic_auth_and_base_path() {
    let f = fixture().await;
    let mut d = start(
        &f.db,
        "dash_reader",
        &["--basic-auth", "ops:pa55", "--base-path", "/jobq/"],
    )
    .await;
    assert_eq!(d.get("/").await.status, StatusCode::UNAUTHORIZED);
    d.auth = Some("Basic b3BzOndyb25n".into()); // ops:wrong
    assert_eq!(d.get("/").await.status, StatusCode::UNAUTHORIZED);
    d.auth = Some("Basic b3BzOnBhNTU=".into()); // ops:pa55
    let home = d.ok("/").await;
    assert!(
        home.contains("href=\"/jobq/jobs\"") && home.contains("/jobq/fragments/overview"),
        "links under the base path"
    );
    assert!(d
        .ok("/jobs?state=dead")
        .await
        .contains(&format!("/jobq/jobs/{}\"", f.dead)));
    let root = Dash {
        base: d.base.replace("/jobq", ""),
        http: d.http.clone(),
        auth: d.auth.clone(),
    };
    assert_eq!(
        root.get("/jobs").await.status,
        StatusCode::NOT_FOUND,
        "nothing outside the base path"
    );
}

#[tokio::test]
async fn charts_draw_the_counters() {
    let f = fixture().await;
    let s = cluster().connect(&f.db, "postgres").await;
    let installed: bool = s
        .query_one(
            "SELECT to_regprocedure('jobq.throughput(timestamptz, interval)') IS NOT NULL",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    if installed {
        // The background worker moves the counters into the table every pass.
        wait_until("counters of queue mail", Duration::from_secs(30), || async {
            s.query_one("SELECT count(*) FROM jobq.throughput(now() - interval '1 hour') WHERE queue = 'mail'", &[]).await.unwrap().get::<_, i64>(0) > 0
        })
        .await;
    } else {
        // An extension without counters yet: the charts say so, then draw a stand-in that
        // keeps the contract.
        let d = start(&f.db, "dash_reader", &[]).await;
        assert!(d.ok("/").await.contains("jobq.throughput is not installed"));
        s.batch_execute(
            "CREATE FUNCTION jobq.throughput(since timestamptz, step interval DEFAULT '1 minute')
             RETURNS TABLE(queue text, bucket timestamptz, enqueued bigint, started bigint, completed bigint, failed bigint,
                           dead bigint, wait_p50_ms float8, wait_p95_ms float8, run_p50_ms float8, run_p95_ms float8)
             LANGUAGE sql AS $$ SELECT 'mail', date_bin(step, now() - m * step, since), 5::bigint, 4::bigint, 3::bigint, 1::bigint,
                                       1::bigint, 10.0::float8, 20.0::float8, 30.0::float8, 40.0::float8
                                  FROM generate_series(1, 3) m $$;
             GRANT EXECUTE ON FUNCTION jobq.throughput(timestamptz, interval) TO jobq_reader;",
        )
        .await
        .unwrap();
    }
    let d = start(&f.db, "dash_reader", &[]).await;
    let home = d.ok("/").await;
    assert!(
        home.contains("<polyline") || home.contains("<circle"),
        "a drawn series: {home}"
    );
    assert!(
        d.ok("/queues/mail").await.contains("<polyline")
            || d.ok("/queues/mail").await.contains("<circle")
    );
}

/// The names of the parameters the pages send: every `name="…"` of their forms and every
/// `?name=` or `&name=` of their links.
fn parameter_names(html: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (i, _) in html.match_indices("name=\"") {
        let rest = &html[i + 6..];
        out.push(rest[..rest.find('"').unwrap()].to_string());
    }
    for sep in ["?", "&amp;"] {
        for (i, _) in html.match_indices(sep) {
            let rest = &html[i + sep.len()..];
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() && rest[name.len()..].starts_with('=') {
                out.push(name);
            }
        }
    }
    out
}

/// PostgreSQL's text cannot hold U+0000 (SQLSTATE 22021): a NUL anywhere a request carries
/// text is the dashboard's 400 page, never a 500, on every route of the router, by either
/// method, in every path parameter, every query parameter (as the value, in the value, in
/// the name) and every form field.
#[tokio::test]
async fn a_nul_anywhere_is_a_400_before_the_database() {
    let f = fixture().await;
    let d = start(&f.db, "dash_admin", &[]).await;
    let token = d.token().await;
    let id = f.dead.to_string();
    let paths = jobq_dash::paths();
    assert!(paths.contains(&"/jobs/{id}/retry") && paths.contains(&"/queues/{queue}"));
    // Each path parameter: a value that names something, and values with a NUL.
    let params: &[(&str, &str, &[&str])] = &[
        ("{queue}", "mail", &["%00", "a%00b", "mail%00"]),
        ("{id}", &id, &["%00", "1%00"]),
    ];
    let fill = |path: &str| {
        params
            .iter()
            .fold(path.to_string(), |p, (k, v, _)| p.replace(k, v))
    };
    for path in &paths {
        let known = params.iter().map(|p| p.0).collect::<Vec<_>>();
        assert!(
            path.split('/')
                .filter(|s| s.starts_with('{'))
                .all(|s| known.contains(&s)),
            "{path}: a path parameter this test does not fill"
        );
    }
    // Every parameter name the pages send, and those the handlers read.
    let mut names: Vec<String> = [
        "queue", "kind", "state", "key", "payload", "before", "action", "msg", "csrf",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    for path in &paths {
        names.extend(parameter_names(&d.get(&fill(path)).await.body));
    }
    names.extend(parameter_names(&d.ok("/jobs/bulk?action=retry").await));
    names.sort();
    names.dedup();
    assert!(names.len() >= 9, "{names:?}");

    let send = |method: &'static str, url: String, form: Vec<(String, String)>| {
        let d = &d;
        let token = &token;
        async move {
            let req = if method == "GET" {
                d.http.get(format!("{}{url}", d.base))
            } else {
                d.http.post(format!("{}{url}", d.base)).form(&form)
            };
            let resp = req
                .header(COOKIE, format!("jobq_dash_csrf={token}"))
                .send()
                .await
                .unwrap();
            (resp.status(), resp.text().await.unwrap())
        }
    };
    // Every request that is not refused with the dashboard's 400 or 404 page, with its
    // status and error (all of them are said at the end).
    let mut wrong: Vec<String> = Vec::new();
    let mut refused = |what: &str, status: StatusCode, body: &str| {
        let page = body.contains("<h1>Bad request</h1>") || body.contains("<h1>Not found</h1>");
        if !(status == StatusCode::BAD_REQUEST || status == StatusCode::NOT_FOUND) || !page {
            let msg = body
                .split("<p class=\"msg bad\">")
                .nth(1)
                .and_then(|m| m.split("</p>").next())
                .unwrap_or("(not the dashboard's error page)");
            wrong.push(format!("{what}: {status}: {msg}"));
        }
    };
    // The form an action needs to reach the database: the token, and an action for the bulk.
    let base_form = |extra: &[(&str, &str)]| {
        let mut form: Vec<(String, String)> = vec![
            ("csrf".into(), token.clone()),
            ("action".into(), "retry".into()),
        ];
        for (k, v) in extra {
            form.retain(|(n, _)| n != k);
            form.push((k.to_string(), v.to_string()));
        }
        form
    };
    let mut tried = 0;
    for path in &paths {
        for method in ["GET", "POST"] {
            // Without a NUL the same request is no 400 (what is tried below is the NUL).
            let ok = fill(path);
            let (status, body) = send(method, format!("{ok}?action=retry"), base_form(&[])).await;
            // (/healthz answers 503 when a figure is not green: the fixture has a dead job.)
            let healthz = *path == "/healthz" && status == StatusCode::SERVICE_UNAVAILABLE;
            assert!(
                status != StatusCode::BAD_REQUEST && (!status.is_server_error() || healthz),
                "{method} {ok}: {status}: {body}"
            );
            // In a path parameter.
            for (k, _, nuls) in params.iter().filter(|p| path.contains(p.0)) {
                for nul in *nuls {
                    let url = params
                        .iter()
                        .fold(path.replace(k, nul), |p, (k, v, _)| p.replace(k, v));
                    let (status, body) =
                        send(method, format!("{url}?action=retry"), base_form(&[])).await;
                    refused(&format!("{method} {url}"), status, &body);
                    tried += 1;
                }
            }
            // In a query parameter: the value, inside the value, in the name.
            for name in &names {
                for q in [
                    format!("action=retry&{name}=%00"),
                    format!("action=retry&{name}=a%00b"),
                    format!("action=retry&{name}%00=x"),
                ] {
                    let url = format!("{ok}?{q}");
                    let (status, body) = send(method, url.clone(), base_form(&[])).await;
                    refused(&format!("{method} {url}"), status, &body);
                    tried += 1;
                }
            }
        }
        // In a form field (an action's, or any route's).
        for name in &names {
            for v in ["\0", "a\0b"] {
                let form = base_form(&[(name.as_str(), v)]);
                let (status, body) = send("POST", fill(path), form).await;
                refused(
                    &format!("POST {} with {name}={v:?}", fill(path)),
                    status,
                    &body,
                );
                tried += 1;
            }
        }
    }
    assert!(tried > 500, "{tried} requests");
    assert!(
        wrong.is_empty(),
        "{} of {tried} requests with a NUL not refused ({} of them with a 500), among them:\n{}",
        wrong.len(),
        wrong.iter().filter(|w| w.contains(" 500 ")).count(),
        wrong
            .iter()
            .filter(|w| w.contains(" 500 "))
            .chain(wrong.iter().filter(|w| !w.contains(" 500 ")))
            .take(20)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
    // The payload filter's JSON may hold no \u0000 either (jsonb refuses it: 22P05).
    let nul_json = "/jobs?payload=%7B%22to%22%3A%22%5Cu0000%22%7D";
    assert!(d.ok(nul_json).await.contains("cannot hold"));
    let (status, body) = send(
        "GET",
        format!("{nul_json}&action=retry").replace("/jobs?", "/jobs/bulk?"),
        vec![],
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
}

#[test]
fn refuses_to_start_off_loopback_without_basic_auth() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_jobq-dash"))
        .args([
            "--database-url",
            "host=127.0.0.1 port=1",
            "--listen",
            "0.0.0.0:0",
        ])
        .env_remove("JOBQ_DASH_BASIC_AUTH")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("refusing to listen on 0.0.0.0:0 without authentication")
            && err.contains("--basic-auth"),
        "{err}"
    );
}

/// Input the database refuses as data (SQLSTATE class 22: here a queue name over 1,000 bytes,
/// which no queue can have) is the 400 page, not a 500, and changes nothing; and a rate
/// limit's window reads exactly as it was set (1.5 s, not "2 s"; 90 s, not "1 min").
#[tokio::test]
async fn bad_data_is_a_400_and_windows_read_exactly() {
    let f = fixture().await;
    let d = start(&f.db, "dash_admin", &[]).await;
    let token = d.token().await;
    let long = "q".repeat(1001);
    let (status, _, body) = d
        .post(&format!("/queues/{long}/pause"), Some(&token), &[("csrf", &token)])
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body.contains("Bad request") && body.contains("22023"), "{body}");
    let s = cluster().connect(&f.db, "postgres").await;
    let pauses: i64 = s.query_one("SELECT count(*) FROM jobq.pauses", &[]).await.unwrap().get(0);
    assert_eq!(pauses, 0, "nothing was paused");

    s.batch_execute(
        "SELECT jobq_set_rate_limit('burst', 3, '1.5 seconds');
         SELECT jobq_set_rate_limit('steady', 10, '90 seconds');",
    )
    .await
    .unwrap();
    let page = d.ok("/rate-limits").await;
    assert!(page.contains("3 per 1.5 s"), "{page}");
    assert!(page.contains("10 per 1 min 30 s"), "{page}");
    assert!(page.contains("100 per 1 min"), "{page}");
}

/// Workflows on the pages: a job's parents and children and what it waits for, blocked jobs
/// in the filters and the queue page, the events page (its payloads hidden with
/// --hide-payloads).
#[tokio::test]
async fn workflows_are_shown() {
    let c = cluster();
    let db = c.fresh_db().await;
    let s = c.connect(&db, "postgres").await;
    let id = |sql: &'static str| {
        let s = &s;
        async move { s.query_one(sql, &[]).await.unwrap_or_else(|e| panic!("{sql}: {e}")).get::<_, i64>(0) }
    };
    let parent = id("SELECT jobq_enqueue('flow', '{}')").await;
    let child: i64 = s
        .query_one("SELECT jobq_enqueue('flow', '{}', depends_on => ARRAY[$1::bigint])", &[&parent])
        .await
        .unwrap()
        .get(0);
    let waiter = id("SELECT jobq_enqueue('events', '{}')").await;
    s.batch_execute(&format!(
        "SELECT jobq_await_event({waiter}, w, 'dash-ev', '1 hour') FROM (SELECT jobq_register_worker('wf') AS w) r,
                LATERAL (SELECT * FROM jobq_checkout(r.w, ARRAY['events'])) j;
         SELECT jobq_emit_event('done-ev', '{{\"secret\": \"s3cr3t-ev\"}}');"
    ))
    .await
    .unwrap();
    assert_eq!(state_of(&db, waiter).await, "blocked");
    let d = start(&db, "dash_admin", &[]).await;
    let page = d.ok(&format!("/jobs/{child}")).await;
    assert!(page.contains("Workflow") && page.contains("1 unfinished job(s)") && page.contains(&link(parent)), "{page}");
    let page = d.ok(&format!("/jobs/{parent}")).await;
    assert!(page.contains("awaited by / depended on by") && page.contains(&link(child)), "{page}");
    let page = d.ok(&format!("/jobs/{waiter}")).await;
    assert!(page.contains("dash-ev") && page.contains("checkpoints"), "{page}");
    let blocked = d.ok("/jobs?state=blocked").await;
    assert!(blocked.contains(&link(child)) && blocked.contains(&link(waiter)) && !blocked.contains(&link(parent)), "{blocked}");
    let q = d.ok("/queues/flow").await;
    assert!(q.contains("<th class=\"n\">blocked</th>") && q.contains("state=blocked"), "{q}");
    let events = d.ok("/events").await;
    assert!(events.contains("dash-ev") && events.contains(&link(waiter)) && events.contains("done-ev") && events.contains("s3cr3t-ev"), "{events}");
    let hidden = start(&db, "dash_admin", &["--hide-payloads"]).await;
    let events = hidden.ok("/events").await;
    assert!(events.contains("done-ev") && !events.contains("s3cr3t-ev"), "{events}");
}

/// /metrics in the Prometheus text format, as a jobq_reader: every family the docs list, the
/// fixture's figures, and a scrape that `promtool check metrics` accepts without a lint;
/// behind basic auth like every page.
#[tokio::test]
async fn metrics_are_prometheus_text_that_promtool_accepts() {
    let f = fixture().await;
    let s = cluster().connect(&f.db, "postgres").await;
    s.batch_execute("SELECT jobq_enqueue('odd \"queue\"\\name')").await.unwrap();
    // The counters reach jobq.queue_totals at the background worker's next pass.
    wait_until("totals of queue mail", Duration::from_secs(30), || async {
        s.query_one("SELECT count(*) FROM jobq.queue_totals WHERE queue = 'mail' AND dead = 1", &[]).await.unwrap().get::<_, i64>(0) == 1
    })
    .await;
    let d = start(&f.db, "dash_reader", &[]).await;
    let resp = d.http.get(format!("{}/metrics", d.base)).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.headers()["content-type"], "text/plain; version=0.0.4; charset=utf-8");
    let m = resp.text().await.unwrap();
    // Every series is labelled with the database first.
    let series = |name: &str, labels: &str| format!("{name}{{database=\"{}\"{}{labels}}}", f.db, if labels.is_empty() { "" } else { "," });
    for (name, labels, want) in [
        ("jobq_database_up", "", 1.0),
        ("jobq_reaper_last_pass_failed", "", 0.0),
        ("jobq_queue_jobs", "queue=\"mail\",state=\"ready\"", 3.0),
        ("jobq_queue_jobs", "queue=\"mail\",state=\"dead\"", 1.0),
        ("jobq_queue_jobs", "queue=\"reports\",state=\"executing\"", 1.0),
        ("jobq_queue_jobs", "queue=\"reports\",state=\"ready\"", 0.0),
        ("jobq_jobs_enqueued_total", "queue=\"mail\"", 4.0),
        ("jobq_jobs_started_total", "queue=\"mail\"", 1.0),
        ("jobq_jobs_dead_total", "queue=\"mail\"", 1.0),
        ("jobq_job_wait_seconds_count", "queue=\"mail\"", 1.0),
        ("jobq_job_wait_seconds_bucket", "queue=\"mail\",le=\"+Inf\"", 1.0),
        ("jobq_job_run_seconds_count", "queue=\"mail\"", 1.0),
        ("jobq_workers", "state=\"alive\"", 1.0),
        ("jobq_workers_jobs_held", "state=\"alive\"", 1.0),
        ("jobq_concurrency_slots_in_use", "kind=\"concurrency\"", 1.0),
        ("jobq_rate_window_max_starts", "key=\"partner-api\"", 100.0),
        ("jobq_schedule_lateness_seconds", "schedule=\"nightly-report\"", 0.0),
        ("jobq_queue_jobs", "queue=\"odd \\\"queue\\\"\\\\name\",state=\"ready\"", 1.0),
    ] {
        let series = series(name, labels);
        assert_eq!(sample(&m, &series), Some(want), "{series} in:\n{m}");
    }
    // A reader reads jobq.pauses: every known queue says whether it is paused (none is here).
    assert_eq!(sample(&m, &series("jobq_queue_paused", "queue=\"mail\"")), Some(0.0), "{m}");
    let age = sample(&m, &format!("jobq_reaper_last_pass_age_seconds{{database=\"{}\"}}", f.db)).unwrap();
    assert!((0.0..30.0).contains(&age), "last pass age {age}");
    assert!(sample(&m, &series("jobq_queue_oldest_ready_age_seconds", "queue=\"mail\"")).unwrap() > 0.0);
    assert!(m.contains(&series("jobq_table_dead_rows_ratio", "table=\"live_jobs\"")), "{m}");
    assert!(m.contains("jobq_horizon_transaction_age_seconds{database="), "{m}");
    assert!(m.contains("# TYPE jobq_horizon_holder_info gauge"), "{m}");
    let (ok, said) = promtool_check(&m);
    assert!(ok && said.trim().is_empty(), "promtool check metrics: {said}\n{m}");
    // Every metric the shipped alert rules and Grafana dashboard query is one served here.
    for file in ["prometheus/jobq-alerts.yml", "prometheus/jobq-alerts.test.yml", "grafana/jobq.json"] {
        let text = std::fs::read_to_string(format!("{}/../deploy/{file}", env!("CARGO_MANIFEST_DIR"))).unwrap();
        for (i, _) in text.match_indices("jobq_") {
            let name: String = text[i..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
            let family = ["_bucket", "_sum", "_count"].iter().find_map(|s| name.strip_suffix(s)).unwrap_or(&name);
            if name.starts_with("jobq_") && !["jobq_admin", "jobq_reader", "jobq_pause"].contains(&family) {
                assert!(m.contains(&format!("# TYPE {family} ")), "{file} queries {name}, which /metrics does not serve");
            }
        }
    }
    // Off loopback with basic auth, /metrics asks for it like every page.
    let d = start(&f.db, "dash_reader", &["--basic-auth", "prom:secret"]).await;
    assert_eq!(d.get("/metrics").await.status, StatusCode::UNAUTHORIZED);
}

/// A real Prometheus (Debian's package), started for the test on a free port, scraping
/// `target` every second; killed when dropped.
struct Prometheus {
    child: std::process::Child,
    url: String,
    _dir: harness_dir::TempDir,
}

mod harness_dir {
    /// A directory removed when dropped.
    pub struct TempDir(pub std::path::PathBuf);
    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

impl Prometheus {
    fn start(target: &str, auth: (&str, &str)) -> Prometheus {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let dir = std::env::temp_dir().join(format!("jobq-prometheus-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let config = dir.join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n  - job_name: jobq\n    \
                 basic_auth:\n      username: {}\n      password: {}\n    static_configs:\n      - targets: ['{target}']\n",
                auth.0, auth.1
            ),
        )
        .unwrap();
        let child = std::process::Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", dir.join("data").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(dir.join("log")).unwrap())
            .spawn()
            .expect("prometheus (Debian's prometheus package; scripts/setup.sh installs it)");
        Prometheus { child, url: format!("http://127.0.0.1:{port}"), _dir: harness_dir::TempDir(dir) }
    }

    /// The value of the instant query `q`, when it has exactly one series.
    async fn value(&self, http: &reqwest::Client, q: &str) -> Option<f64> {
        let resp = http.get(format!("{}/api/v1/query", self.url)).query(&[("query", q)]).send().await.ok()?;
        let v: serde_json::Value = serde_json::from_str(&resp.text().await.ok()?).ok()?;
        let result = v["data"]["result"].as_array()?;
        if result.len() != 1 {
            return None;
        }
        result[0]["value"][1].as_str()?.parse().ok()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A real Prometheus scrapes /metrics (with basic auth) and, through its HTTP API, sees a
/// counter move after jobs completed.
#[tokio::test]
async fn a_real_prometheus_scrapes_a_counter_that_moves() {
    let c = cluster();
    let db = c.fresh_db().await;
    let s = c.connect(&db, "postgres").await;
    s.batch_execute("SELECT jobq_enqueue('scraped') FROM generate_series(1, 5)").await.unwrap();
    // The dashboard on a free port of its own (the router as `start` makes it, with auth).
    let url = c.url(&db, "dash_reader");
    let cfg = Config::try_parse_from(["jobq-dash", "--database-url", &url, "--basic-auth", "prom:s3cret"]).unwrap();
    let router = jobq_dash::router(cfg).await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    let prom = Prometheus::start(&addr.to_string(), ("prom", "s3cret"));
    let http = reqwest::Client::new();
    let completed = "jobq_jobs_completed_total{queue=\"scraped\"}";
    let within = Duration::from_secs(60);
    wait_until("Prometheus to scrape 5 enqueued, 0 completed", within, || async {
        prom.value(&http, "jobq_jobs_enqueued_total{queue=\"scraped\"}").await == Some(5.0) && prom.value(&http, completed).await == Some(0.0)
    })
    .await;
    let w: String = s.query_one("SELECT jobq_register_worker()::text", &[]).await.unwrap().get(0);
    let ids: Vec<i64> = s
        .query("SELECT id FROM jobq_checkout($1::text::uuid, ARRAY['scraped'], 5)", &[&w])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(ids.len(), 5);
    for id in ids {
        s.execute("SELECT jobq_complete($1, $2::text::uuid)", &[&id, &w]).await.unwrap();
    }
    wait_until("Prometheus to see the 5 completions", within, || async { prom.value(&http, completed).await == Some(5.0) }).await;
    // And the histograms: 5 runs counted.
    assert_eq!(prom.value(&http, "jobq_job_run_seconds_count{queue=\"scraped\"}").await, Some(5.0));
}

/// The health page for people: each figure labelled, coloured against its thresholds, and,
/// when it is not green, what to do; the session holding the horizon named with the query
/// that ends it.
#[tokio::test]
async fn the_health_page_says_what_is_wrong_and_what_to_do() {
    use jobq_dash::thresholds::{QUEUE_WAIT, REAPER_PASS_AGE};
    let c = cluster();
    let db = c.fresh_db().await;
    let s = c.connect(&db, "postgres").await;
    s.batch_execute("SELECT jobq_enqueue('late', run_at => now() - interval '10 minutes')").await.unwrap();
    // A session in a transaction that holds a snapshot: the horizon's holder.
    let holder = c.connect(&db, "postgres").await;
    holder.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT 1").await.unwrap();
    let pid: i32 = holder.query_one("SELECT pg_backend_pid()", &[]).await.unwrap().get(0);
    wait_until("a pass of the background worker", Duration::from_secs(30), || async {
        s.query_one("SELECT last_pass_at IS NOT NULL FROM jobq.health", &[]).await.unwrap().get::<_, bool>(0)
    })
    .await;
    let d = start(&db, "dash_reader", &[]).await;
    let page = d.ok("/health").await;
    let row = |label: &str| -> String {
        let at = page.find(label).unwrap_or_else(|| panic!("{label} in {page}"));
        let start = page[..at].rfind("<tr").unwrap();
        page[start..at + page[at..].find("</tr>").unwrap()].to_string()
    };
    let late = row(QUEUE_WAIT.label);
    assert!(late.starts_with("<tr class=\"bad\"") && late.contains(">red<") && late.contains("10 min"), "{late}");
    assert!(late.contains("What to do: ") && late.contains(QUEUE_WAIT.when_red) && late.contains("/queues/late"), "{late}");
    let reaper = row(REAPER_PASS_AGE.label);
    assert!(reaper.contains(">green<") && !reaper.contains("What to do"), "{reaper}");
    assert!(page.contains(&format!("pg_terminate_backend({pid});")), "{page}");
    // /metrics names it too.
    let m = d.ok("/metrics").await;
    assert!(m.contains(&format!("jobq_horizon_holder_info{{database=\"{db}\",holder=\"session\",pid=\"{pid}\",role=\"postgres\",state=")), "{m}");
    holder.batch_execute("COMMIT").await.unwrap();
}

/// The dashboard names the jobq each database has, as jobq_version() says: its release and its
/// edition (the extension, or the SQL edition when the tests run against it), in the nav bar
/// and in /health.json; and, in the SQL edition, a database where nothing runs the passes
/// (no pg_cron, no worker that heartbeats) is told what runs them there, not to preload a
/// library.
#[tokio::test]
async fn the_dashboard_names_the_edition_it_serves() {
    use jobq_dash::thresholds::REAPER_PASS_AGE;
    let c = cluster();
    let db = c.fresh_db().await;
    let s = c.connect(&db, "postgres").await;
    let v = s.query_one("SELECT version, edition FROM jobq_version()", &[]).await.unwrap();
    let (version, edition): (String, String) = (v.get(0), v.get(1));
    let (want, label) = if common::sql_edition() { ("sql", "SQL edition") } else { ("extension", "extension") };
    assert_eq!(edition, want, "the edition the tests run against");
    assert_eq!(version, env!("CARGO_PKG_VERSION"), "the release of this workspace");
    let d = start(&db, "dash_reader", &[]).await;
    let named = format!("jobq {version} ({label}) · connected as dash_reader");
    for path in ["/", "/workers", "/health"] {
        let page = d.ok(path).await;
        assert!(page.contains(&named), "{path} names {named:?}: {page}");
    }
    let j: serde_json::Value = serde_json::from_str(&d.ok("/health.json").await).unwrap();
    assert_eq!(j["databases"][0]["jobq"], serde_json::json!({"version": version, "edition": want}), "{j:#}");

    if !common::sql_edition() {
        return;
    }
    // No pass ever ran here: the figure is red, and what to do names pg_cron and heartbeats.
    let idle = c.fresh_db_without_passes().await;
    let d = start(&idle, "dash_reader", &[]).await;
    let page = d.ok("/health").await;
    assert!(page.contains("no pass yet") && !page.contains("not preloaded"), "{page}");
    let j: serde_json::Value = serde_json::from_str(&d.ok("/health.json").await).unwrap();
    let figures = j["databases"][0]["figures"].as_array().unwrap();
    let passes = figures.iter().find(|f| f["alert"] == REAPER_PASS_AGE.alert).unwrap();
    assert_eq!((passes["level"].as_str(), &passes["value"]), (Some("red"), &serde_json::Value::Null), "{passes:#}");
    let todo = REAPER_PASS_AGE.when_red_sql.unwrap();
    assert_eq!(passes["what_to_do"].as_str(), Some(todo), "{passes:#}");
    assert!(todo.contains("jobq_schedule_passes()") && !todo.contains("shared_preload_libraries"));
    assert!(page.contains(todo), "{page}");
}
