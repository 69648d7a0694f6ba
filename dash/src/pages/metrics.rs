//! `/metrics`: what the extension keeps, in the Prometheus text format (version 0.0.4), for a
//! Prometheus server to scrape. Every figure comes from a view or table the extension keeps
//! up to date (docs/monitoring.md names each one's source); nothing reads the job history
//! beyond the jobs not yet finished, the index of dead ones and one index descent per queue,
//! so a scrape costs the same at 10 million finished jobs (bench/dash.sh). Counters and
//! histograms come from `jobq.queue_totals`, which only goes up, across restarts of this
//! exporter and of the server. Served like every page: as the dashboard's role (jobq_reader
//! suffices), behind basic auth off loopback.
//!
//! Every series has a `database` label (`Db::name`). At the base path /metrics reads every
//! database the dashboard serves, at once; `/db/<name>/metrics` that one only. A database that
//! cannot be read is `jobq_database_up 0` (and the reason is logged); when none can be, the
//! scrape fails.

use crate::db::{AppError, Db};
use crate::App;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Arc;
use tokio_postgres::Row;

/// The content type Prometheus expects of the text format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The label value the rate keys past `--metrics-rate-keys` are summed under.
pub const OTHER_KEYS: &str = "_other";

pub async fn page(State(app): State<Arc<App>>) -> Result<impl IntoResponse, AppError> {
    let scope = app.scope();
    let reads: Vec<_> = scope
        .iter()
        .map(|db| {
            let (db, rate_keys) = (db.clone(), app.cfg.metrics_rate_keys);
            tokio::spawn(async move { read(&db, rate_keys).await })
        })
        .collect();
    let mut m = Exposition::default();
    m.family("", "jobq_database_up", "gauge", "1 when this scrape read the database, 0 when it could not (jobq-dash logs why).");
    let mut up = Vec::new();
    let mut failure = None;
    for (db, read) in scope.iter().zip(reads) {
        match read.await.map_err(|e| AppError::Unavailable(e.to_string())).and_then(|r| r) {
            Ok(s) => {
                write(&mut m, &db.name, &s);
                up.push((db.name.as_str(), 1.0));
            }
            Err(e) => {
                eprintln!("jobq-dash: /metrics: database {}: {e}", db.name);
                up.push((db.name.as_str(), 0.0));
                failure.get_or_insert(e);
            }
        }
    }
    if let (Some(e), true) = (failure, up.iter().all(|(_, v)| *v == 0.0)) {
        return Err(e);
    }
    for (db, v) in up {
        m.family(db, "jobq_database_up", "", "").sample("jobq_database_up", &[], v);
    }
    Ok(([(header::CONTENT_TYPE, CONTENT_TYPE)], m.text()))
}

/// The families of a scrape in the order first written, each its `# HELP` and `# TYPE` lines
/// and then its samples, of every database.
#[derive(Default)]
struct Exposition {
    families: Vec<(&'static str, String)>,
}

impl Exposition {
    /// Family `name`, its samples labelled `database="{database}"`; made on first use.
    fn family<'a>(&'a mut self, database: &'a str, name: &'static str, kind: &str, help: &str) -> Family<'a> {
        let i = match self.families.iter().position(|(n, _)| *n == name) {
            Some(i) => i,
            None => {
                self.families.push((name, format!("# HELP {name} {help}\n# TYPE {name} {kind}\n")));
                self.families.len() - 1
            }
        };
        Family { out: &mut self.families[i].1, database }
    }

    fn text(self) -> String {
        self.families.into_iter().map(|(_, text)| text).collect()
    }
}

/// One metric family's samples of one database.
struct Family<'a> {
    out: &'a mut String,
    database: &'a str,
}

impl Family<'_> {
    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: f64) -> &mut Self {
        let _ = write!(self.out, "{name}{{database=\"{}\"", escape(self.database));
        for (k, v) in labels {
            let _ = write!(self.out, ",{k}=\"{}\"", escape(v));
        }
        let _ = writeln!(self.out, "}} {}", number(value));
        self
    }
}

/// A label value as the text format writes it: backslash, double quote and newline escaped.
pub fn escape(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// A sample value: integers without a fraction, +Inf and NaN as the format spells them.
fn number(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

/// A histogram of the extension's buckets (`bounds_ms`, the last +Inf) as cumulative
/// `_bucket` samples in seconds, with `_sum` and `_count`.
fn histogram(f: &mut Family, name: &str, queue: &str, bounds_ms: &[f64], counts: &[i64], sum_us: i64) {
    let mut cumulative = 0i64;
    for (i, bound) in bounds_ms.iter().enumerate() {
        cumulative += counts.get(i).copied().unwrap_or(0);
        let le = if bound.is_infinite() { "+Inf".to_string() } else { format!("{}", bound / 1000.0) };
        f.sample(&format!("{name}_bucket"), &[("queue", queue), ("le", &le)], cumulative as f64);
    }
    f.sample(&format!("{name}_sum"), &[("queue", queue)], sum_us as f64 / 1e6);
    f.sample(&format!("{name}_count"), &[("queue", queue)], cumulative as f64);
}

/// The jobs not yet finished, by queue: due, scheduled, executing, blocked, and the oldest due
/// job's wait in seconds.
const LIVE: &str = "WITH t AS MATERIALIZED (SELECT now() AS now)
    SELECT j.queue,
           count(*) FILTER (WHERE j.state = 'ready' AND j.run_at <= t.now),
           count(*) FILTER (WHERE j.state = 'ready' AND j.run_at > t.now),
           count(*) FILTER (WHERE j.state = 'executing'),
           count(*) FILTER (WHERE j.state = 'blocked'),
           extract(epoch FROM t.now - min(j.run_at) FILTER (WHERE j.state = 'ready' AND j.run_at <= t.now))::float8
      FROM jobq.live_jobs j CROSS JOIN t GROUP BY j.queue, t.now";

/// Every queue with a job not yet pruned, and its dead jobs: jobq.queue_stats (the dead ones
/// from the index of unusual finished jobs, the queues of the rest of the history by one index
/// descent each, never the completed jobs themselves).
const QUEUES: &str = "SELECT queue, dead FROM jobq.queue_stats";

/// The queues with a pause, and whether the whole queue is paused (not only kinds of it).
const PAUSES: &str = "SELECT queue, bool_or(kind IS NULL) FROM jobq.pauses WHERE queue IS NOT NULL GROUP BY queue";

/// The rate keys: the `$1` with the most starts in their window by name, the rest summed
/// under OTHER_KEYS.
const RATES: &str = "SELECT CASE WHEN r.n <= $1 THEN r.key ELSE '_other' END, sum(r.starts_in_window)::bigint, sum(r.max_starts)::bigint
      FROM (SELECT key, starts_in_window, max_starts,
                   row_number() OVER (ORDER BY starts_in_window DESC, key) AS n
              FROM jobq.rate_windows) r
     GROUP BY 1 ORDER BY 1";

/// What a scrape reads of one database.
struct Snapshot {
    live: Vec<Row>,
    queues: Vec<Row>,
    /// None when the role may not read jobq.pauses.
    pauses: Option<Vec<Row>>,
    bounds: Vec<f64>,
    totals: Vec<Row>,
    workers: Vec<Row>,
    health: Row,
    tables: Vec<Row>,
    slots: Vec<Row>,
    rates: Vec<Row>,
    schedules: Vec<Row>,
}

async fn read(db: &Db, rate_keys: i64) -> Result<Snapshot, AppError> {
    let access = db.access().await?;
    // Three connections: the two passes over jobs (the ones not yet finished, the queues and
    // the index of dead ones) run beside the small reads, so a scrape takes about as long as
    // the longest of them.
    let (a, b, client) = tokio::try_join!(db.client(), db.client(), db.client())?;
    let small = async {
        let pauses = match access.pauses {
            true => Some(client.query(PAUSES, &[]).await?),
            false => None,
        };
        let bounds: Vec<f64> = client.query_one("SELECT jobq.histogram_bounds()", &[]).await?.get(0);
        let totals = client
            .query(
                "SELECT queue, enqueued, started, completed, failed, dead, wait_ms, run_ms, wait_us, run_us
                   FROM jobq.queue_totals ORDER BY queue",
                &[],
            )
            .await?;
        let workers = client
            .query(
                &format!(
                    "SELECT coalesce(w.heartbeat_at > now() - {}, true) AS alive,
                            count(*), coalesce(sum((SELECT count(*) FROM jobq.live_jobs j
                                                     WHERE j.worker_id = w.id AND j.state = 'executing')), 0)::bigint
                       FROM jobq.workers w GROUP BY 1",
                    crate::db::HEARTBEAT_TIMEOUT
                ),
                &[],
            )
            .await?;
        // jobq.health's sources, without its dead-row share (read per table below).
        let health = client
            .query_one(
                "SELECT extract(epoch FROM now() - p.ended_at)::float8, p.took_ms,
                        p.error IS NOT NULL, coalesce(extract(epoch FROM h.xact_age)::float8, 0),
                        coalesce(h.xmin_age, 0)::float8, pg_notification_queue_usage(),
                        h.holder, h.pid::text, h.role, h.state
                   FROM (SELECT) one
                   LEFT JOIN jobq._last_pass() p ON true
                   LEFT JOIN jobq._oldest_horizon() h ON true",
                &[],
            )
            .await?;
        let tables = client
            .query("SELECT table_name, coalesce(dead_share, 0)::float8, coalesce(dead_rows, 0) FROM jobq.table_stats ORDER BY table_name", &[])
            .await?;
        let slots = client
            .query(
                "SELECT k.kind, coalesce(sum(s.executing), 0)::bigint, count(*) FILTER (WHERE s.executing >= s.max_limit)
                   FROM (VALUES ('concurrency'), ('while_executing')) k(kind)
                   LEFT JOIN jobq.concurrency_slots s ON s.kind = k.kind GROUP BY k.kind ORDER BY k.kind",
                &[],
            )
            .await?;
        let rates = client.query(RATES, &[&rate_keys]).await?;
        let schedules = client
            .query("SELECT name, greatest(extract(epoch FROM now() - next_run_at), 0)::float8 FROM jobq.schedules ORDER BY name", &[])
            .await?;
        Ok::<_, tokio_postgres::Error>((pauses, bounds, totals, workers, health, tables, slots, rates, schedules))
    };
    let (live, queues, (pauses, bounds, totals, workers, health, tables, slots, rates, schedules)) =
        tokio::try_join!(a.query(LIVE, &[]), b.query(QUEUES, &[]), small)?;
    Ok(Snapshot { live, queues, pauses, bounds, totals, workers, health, tables, slots, rates, schedules })
}

/// A queue's jobs by state (ready, scheduled, blocked, executing, dead) and its oldest due job's wait.
type Depth = ([i64; 5], Option<f64>);

/// One database's families, labelled `database="{db}"`.
fn write(m: &mut Exposition, db: &str, s: &Snapshot) {
    // Every queue known: counted ever (queue_totals), with a job not yet pruned (queue_stats),
    // or paused; each has its figures, 0 when it has no job.
    let mut depths: BTreeMap<String, Depth> = BTreeMap::new();
    for r in &s.totals {
        depths.entry(r.get(0)).or_default();
    }
    for r in &s.queues {
        depths.entry(r.get(0)).or_default().0[4] = r.get(1);
    }
    let paused: Option<BTreeMap<String, bool>> = s.pauses.as_ref().map(|rows| rows.iter().map(|r| (r.get(0), r.get(1))).collect());
    for q in paused.iter().flat_map(|p| p.keys()) {
        depths.entry(q.clone()).or_default();
    }
    for r in &s.live {
        let d = depths.entry(r.get(0)).or_default();
        d.0[0] = r.get(1);
        d.0[1] = r.get(2);
        d.0[3] = r.get(3);
        d.0[2] = r.get(4);
        d.1 = r.get(5);
    }

    {
        let mut f = m.family(
            db,
            "jobq_queue_jobs",
            "gauge",
            "Jobs of the queue now, by state: ready (due), scheduled (ready, not yet due), blocked, executing, dead (kept until pruned).",
        );
        for (q, (n, _)) in &depths {
            for (state, count) in ["ready", "scheduled", "blocked", "executing", "dead"].iter().zip(n) {
                f.sample("jobq_queue_jobs", &[("queue", q), ("state", state)], *count as f64);
            }
        }
    }
    {
        let mut f = m.family(
            db,
            "jobq_queue_oldest_ready_age_seconds",
            "gauge",
            "How long the oldest due ready job of the queue has waited since it was due; 0 when none waits.",
        );
        for (q, (_, oldest)) in &depths {
            f.sample("jobq_queue_oldest_ready_age_seconds", &[("queue", q)], oldest.unwrap_or(0.0));
        }
    }
    {
        let mut f = m.family(
            db,
            "jobq_queue_paused",
            "gauge",
            "1 when the queue is paused (jobq_pause(queue)), else 0; no sample unless the role may read jobq.pauses.",
        );
        for (q, paused) in paused.iter().flat_map(|p| depths.keys().map(move |q| (q, p.get(q) == Some(&true)))) {
            f.sample("jobq_queue_paused", &[("queue", q)], if paused { 1.0 } else { 0.0 });
        }
    }

    // What jobs did, ever: counters and histograms (jobq.queue_totals).
    for (i, (name, help)) in [
        ("jobq_jobs_enqueued_total", "Jobs enqueued."),
        ("jobq_jobs_started_total", "Attempts started (checkouts)."),
        ("jobq_jobs_completed_total", "Jobs completed."),
        ("jobq_jobs_failed_total", "Attempts that failed (jobq_fail) or were cut off (reaped)."),
        ("jobq_jobs_dead_total", "Jobs that became dead (attempts exhausted or discarded)."),
    ]
    .into_iter()
    .enumerate()
    {
        let mut f = m.family(db, name, "counter", help);
        for r in &s.totals {
            let q: String = r.get(0);
            f.sample(name, &[("queue", &q)], r.get::<_, i64>(i + 1) as f64);
        }
    }
    for (name, col, sum_col, help) in [
        ("jobq_job_wait_seconds", 6, 8, "Wait of each attempt, from due (run_at) to started."),
        ("jobq_job_run_seconds", 7, 9, "Run of each attempt, from started to completed or failed."),
    ] {
        let mut f = m.family(db, name, "histogram", help);
        for r in &s.totals {
            let q: String = r.get(0);
            histogram(&mut f, name, &q, &s.bounds, &r.get::<_, Vec<i64>>(col), r.get(sum_col));
        }
    }

    // Workers: alive (heartbeat within jobq.heartbeat_timeout) or stale (to be reaped), and
    // the jobs they hold.
    let by_state = |alive: bool, col: usize| -> f64 {
        s.workers.iter().find(|r| r.get::<_, bool>(0) == alive).map(|r| r.get::<_, i64>(col) as f64).unwrap_or(0.0)
    };
    m.family(db, "jobq_workers", "gauge", "Registered workers: alive (heartbeat within jobq.heartbeat_timeout) or stale (past it, to be reaped).")
        .sample("jobq_workers", &[("state", "alive")], by_state(true, 1))
        .sample("jobq_workers", &[("state", "stale")], by_state(false, 1));
    m.family(db, "jobq_workers_jobs_held", "gauge", "Jobs executing under the workers, by the workers' state.")
        .sample("jobq_workers_jobs_held", &[("state", "alive")], by_state(true, 2))
        .sample("jobq_workers_jobs_held", &[("state", "stale")], by_state(false, 2));

    // This database's background worker and vacuum horizon (what jobq.health shows).
    let h = &s.health;
    m.family(
        db,
        "jobq_reaper_last_pass_age_seconds",
        "gauge",
        "Time since the background worker's last reap pass in this database; +Inf when none ran since the server started.",
    )
    .sample("jobq_reaper_last_pass_age_seconds", &[], h.get::<_, Option<f64>>(0).unwrap_or(f64::INFINITY));
    m.family(db, "jobq_reaper_last_pass_duration_seconds", "gauge", "How long the last reap pass took.")
        .sample("jobq_reaper_last_pass_duration_seconds", &[], h.get::<_, Option<f64>>(1).map(|ms| ms / 1000.0).unwrap_or(0.0));
    m.family(db, "jobq_reaper_last_pass_failed", "gauge", "1 when the last reap pass failed (its error is on the dashboard's health page), else 0.")
        .sample("jobq_reaper_last_pass_failed", &[], if h.get::<_, bool>(2) { 1.0 } else { 0.0 });
    m.family(
        db,
        "jobq_horizon_transaction_age_seconds",
        "gauge",
        "Age of the oldest transaction of this database (or prepared transaction) holding back the vacuum horizon; 0 when none.",
    )
    .sample("jobq_horizon_transaction_age_seconds", &[], h.get(3));
    m.family(db, "jobq_horizon_xmin_age_transactions", "gauge", "Transactions since the oldest snapshot still held began (age of the horizon's xmin).")
        .sample("jobq_horizon_xmin_age_transactions", &[], h.get(4));
    {
        let mut f = m.family(
            db,
            "jobq_horizon_holder_info",
            "gauge",
            "1 for what holds the vacuum horizon: a session (its pid, role and state), a replication slot or a prepared transaction; no sample when nothing does.",
        );
        if let Some(holder) = h.get::<_, Option<String>>(6) {
            let text = |i: usize| h.get::<_, Option<String>>(i).unwrap_or_default();
            let (pid, role, state) = (text(7), text(8), text(9));
            f.sample("jobq_horizon_holder_info", &[("holder", &holder), ("pid", &pid), ("role", &role), ("state", &state)], 1.0);
        }
    }
    m.family(db, "jobq_notify_queue_usage_ratio", "gauge", "Share of the server's NOTIFY queue in use (0 to 1).")
        .sample("jobq_notify_queue_usage_ratio", &[], h.get::<_, Option<f64>>(5).unwrap_or(0.0));

    // jobq's tables: dead rows' share (statistics the server keeps).
    {
        let mut f = m.family(db, "jobq_table_dead_rows_ratio", "gauge", "Share of dead row versions in each of jobq's tables (0 to 1), from the server's statistics.");
        for r in &s.tables {
            f.sample("jobq_table_dead_rows_ratio", &[("table", &r.get::<_, String>(0))], r.get(1));
        }
    }
    {
        let mut f = m.family(db, "jobq_table_dead_rows", "gauge", "Dead row versions in each of jobq's tables, from the server's statistics.");
        for r in &s.tables {
            f.sample("jobq_table_dead_rows", &[("table", &r.get::<_, String>(0))], r.get::<_, i64>(2) as f64);
        }
    }

    // Concurrency slots in use and keys at their limit (keys may be many: not one series each).
    {
        let mut f = m.family(db, "jobq_concurrency_slots_in_use", "gauge", "Concurrency slots held by executing jobs, by kind of key.");
        for r in &s.slots {
            f.sample("jobq_concurrency_slots_in_use", &[("kind", &r.get::<_, String>(0))], r.get::<_, i64>(1) as f64);
        }
    }
    {
        let mut f = m.family(db, "jobq_concurrency_keys_full", "gauge", "Concurrency keys with every slot taken, by kind of key.");
        for r in &s.slots {
            f.sample("jobq_concurrency_keys_full", &[("kind", &r.get::<_, String>(0))], r.get::<_, i64>(2) as f64);
        }
    }

    // Rate limits: the keys with the most starts (--metrics-rate-keys), the rest as one.
    for (name, col, help) in [
        ("jobq_rate_window_starts", 1, "Starts in the rate key's current window; the keys past --metrics-rate-keys summed as key=\"_other\"."),
        ("jobq_rate_window_max_starts", 2, "The rate key's limit of starts per window; the keys past --metrics-rate-keys summed as key=\"_other\"."),
    ] {
        let mut f = m.family(db, name, "gauge", help);
        for r in &s.rates {
            f.sample(name, &[("key", &r.get::<_, String>(0))], r.get::<_, i64>(col) as f64);
        }
    }

    // Schedules: how late the next tick is (0 while it is in the future).
    {
        let mut f = m.family(db, "jobq_schedule_lateness_seconds", "gauge", "How far the schedule's next tick is past due (0 while it is in the future).");
        for r in &s.schedules {
            f.sample("jobq_schedule_lateness_seconds", &[("schedule", &r.get::<_, String>(0))], r.get(1));
        }
    }
}

#[cfg(test)]
mod unit {
    use super::*;

    #[test]
    fn label_values_and_numbers_are_written_as_the_format_says() {
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
        assert_eq!(number(3.0), "3");
        assert_eq!(number(0.25), "0.25");
        assert_eq!(number(f64::INFINITY), "+Inf");
        assert_eq!(number(f64::NAN), "NaN");
    }

    #[test]
    fn histograms_are_cumulative_in_seconds() {
        let mut m = Exposition::default();
        histogram(&mut m.family("d", "x_seconds", "histogram", "h"), "x_seconds", "q", &[1.0, 500.0, f64::INFINITY], &[2, 0, 1], 3_500_000);
        assert_eq!(
            m.text(),
            "# HELP x_seconds h\n# TYPE x_seconds histogram\n\
             x_seconds_bucket{database=\"d\",queue=\"q\",le=\"0.001\"} 2\nx_seconds_bucket{database=\"d\",queue=\"q\",le=\"0.5\"} 2\n\
             x_seconds_bucket{database=\"d\",queue=\"q\",le=\"+Inf\"} 3\nx_seconds_sum{database=\"d\",queue=\"q\"} 3.5\n\
             x_seconds_count{database=\"d\",queue=\"q\"} 3\n"
        );
    }

    #[test]
    fn the_samples_of_every_database_follow_their_familys_one_header() {
        let mut m = Exposition::default();
        for db in ["a", "b\"c"] {
            m.family(db, "x", "gauge", "an x").sample("x", &[("queue", "q")], 1.0);
            m.family(db, "y", "gauge", "a y").sample("y", &[], 2.0);
        }
        assert_eq!(
            m.text(),
            "# HELP x an x\n# TYPE x gauge\nx{database=\"a\",queue=\"q\"} 1\nx{database=\"b\\\"c\",queue=\"q\"} 1\n\
             # HELP y a y\n# TYPE y gauge\ny{database=\"a\"} 2\ny{database=\"b\\\"c\"} 2\n"
        );
    }
}
