//! `/metrics`: what the extension keeps, in the Prometheus text format (version 0.0.4), for a
//! Prometheus server to scrape. Every figure comes from a view or table the extension keeps
//! up to date (docs/monitoring.md names each one's source); nothing reads the job history
//! beyond the jobs not yet finished and the index of dead ones, so a scrape costs the same at 10 million finished jobs
//! (bench/metrics.sh). Counters and histograms come from `jobq.queue_totals`, which only goes
//! up, across restarts of this exporter and of the server. Served like every page: as the
//! dashboard's role (jobq_reader suffices), behind basic auth off loopback.

use crate::db::AppError;
use crate::App;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use std::fmt::Write;
use std::sync::Arc;

/// The content type Prometheus expects of the text format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

pub async fn page(State(app): State<Arc<App>>) -> Result<impl IntoResponse, AppError> {
    let text = scrape(&app).await?;
    Ok(([(header::CONTENT_TYPE, CONTENT_TYPE)], text))
}

/// One metric family: its `# HELP` and `# TYPE` lines, then its samples.
struct Family<'a> {
    out: &'a mut String,
}

impl<'a> Family<'a> {
    fn new(out: &'a mut String, name: &str, kind: &str, help: &str) -> Family<'a> {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} {kind}");
        Family { out }
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: f64) -> &mut Self {
        self.out.push_str(name);
        if !labels.is_empty() {
            self.out.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                let _ = write!(self.out, "{k}=\"{}\"", escape(v));
            }
            self.out.push('}');
        }
        let _ = writeln!(self.out, " {}", number(value));
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

/// The dead jobs kept, by queue, from the index of unusual finished jobs (jobs_finished_unusual),
/// never the completed history.
const DEAD: &str = "SELECT f.queue, count(*) FROM jobq.finished_jobs f WHERE f.state = 'dead' GROUP BY f.queue";

/// A queue's jobs by state (ready, scheduled, blocked, executing, dead) and its oldest due job's wait.
type Depth = ([i64; 5], Option<f64>);

async fn scrape(app: &App) -> Result<String, AppError> {
    // Three connections: the two passes over jobs (the ones not yet finished, the index of dead
    // ones) run beside the small reads, so a scrape takes about as long as the longest of them.
    let (a, b, client) = tokio::try_join!(app.db.client(), app.db.client(), app.db.client())?;
    let small = async {
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
                "SELECT coalesce(w.heartbeat_at > now() - current_setting('jobq.heartbeat_timeout', true)::interval, true) AS alive,
                        count(*), coalesce(sum((SELECT count(*) FROM jobq.live_jobs j
                                                 WHERE j.worker_id = w.id AND j.state = 'executing')), 0)::bigint
                   FROM jobq.workers w GROUP BY 1",
                &[],
            )
            .await?;
        // jobq.health's sources, without its dead-row share (read per table below).
        let health = client
            .query_one(
                "SELECT current_database()::text, extract(epoch FROM now() - p.ended_at)::float8, p.took_ms,
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
        let rates = client.query("SELECT key, starts_in_window, max_starts FROM jobq.rate_windows ORDER BY key", &[]).await?;
        let schedules = client
            .query("SELECT name, greatest(extract(epoch FROM now() - next_run_at), 0)::float8 FROM jobq.schedules ORDER BY name", &[])
            .await?;
        Ok::<_, tokio_postgres::Error>((bounds, totals, workers, health, tables, slots, rates, schedules))
    };
    let (live, dead, (bounds, totals, workers, h, tables, slots, rates, schedules)) =
        tokio::try_join!(a.query(LIVE, &[]), b.query(DEAD, &[]), small)?;
    let mut depths: std::collections::BTreeMap<String, Depth> = std::collections::BTreeMap::new();
    for r in &live {
        let d = depths.entry(r.get(0)).or_default();
        d.0[0] = r.get(1);
        d.0[1] = r.get(2);
        d.0[3] = r.get(3);
        d.0[2] = r.get(4);
        d.1 = r.get(5);
    }
    for r in &dead {
        depths.entry(r.get(0)).or_default().0[4] = r.get(1);
    }
    let mut out = String::new();

    {
        let mut f = Family::new(
            &mut out,
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
        let mut f = Family::new(
            &mut out,
            "jobq_queue_oldest_ready_age_seconds",
            "gauge",
            "How long the oldest due ready job of the queue has waited since it was due; 0 when none waits.",
        );
        for (q, (_, oldest)) in &depths {
            f.sample("jobq_queue_oldest_ready_age_seconds", &[("queue", q)], oldest.unwrap_or(0.0));
        }
    }

    // What jobs did, ever: counters and histograms (jobq.queue_totals).
    for (i, (event, help)) in [
        ("enqueued", "Jobs enqueued."),
        ("started", "Attempts started (checkouts)."),
        ("completed", "Jobs completed."),
        ("failed", "Attempts that failed (jobq_fail) or were cut off (reaped)."),
        ("dead", "Jobs that became dead (attempts exhausted or discarded)."),
    ]
    .iter()
    .enumerate()
    {
        let name = format!("jobq_jobs_{event}_total");
        let mut f = Family::new(&mut out, &name, "counter", help);
        for r in &totals {
            let q: String = r.get(0);
            f.sample(&name, &[("queue", &q)], r.get::<_, i64>(i + 1) as f64);
        }
    }
    for (name, col, sum_col, help) in [
        ("jobq_job_wait_seconds", 6, 8, "Wait of each attempt, from due (run_at) to started."),
        ("jobq_job_run_seconds", 7, 9, "Run of each attempt, from started to completed or failed."),
    ] {
        let mut f = Family::new(&mut out, name, "histogram", help);
        for r in &totals {
            let q: String = r.get(0);
            histogram(&mut f, name, &q, &bounds, &r.get::<_, Vec<i64>>(col), r.get(sum_col));
        }
    }

    // Workers: alive (heartbeat within jobq.heartbeat_timeout) or stale (to be reaped), and
    // the jobs they hold.
    let by_state = |alive: bool, col: usize| -> f64 {
        workers.iter().find(|r| r.get::<_, bool>(0) == alive).map(|r| r.get::<_, i64>(col) as f64).unwrap_or(0.0)
    };
    Family::new(&mut out, "jobq_workers", "gauge", "Registered workers: alive (heartbeat within jobq.heartbeat_timeout) or stale (past it, to be reaped).")
        .sample("jobq_workers", &[("state", "alive")], by_state(true, 1))
        .sample("jobq_workers", &[("state", "stale")], by_state(false, 1));
    Family::new(&mut out, "jobq_workers_jobs_held", "gauge", "Jobs executing under the workers, by the workers' state.")
        .sample("jobq_workers_jobs_held", &[("state", "alive")], by_state(true, 2))
        .sample("jobq_workers_jobs_held", &[("state", "stale")], by_state(false, 2));

    // This database's background worker and vacuum horizon (what jobq.health shows).
    let db: String = h.get(0);
    let db = [("database", db.as_str())];
    Family::new(
        &mut out,
        "jobq_reaper_last_pass_age_seconds",
        "gauge",
        "Time since the background worker's last reap pass in this database; +Inf when none ran since the server started.",
    )
    .sample("jobq_reaper_last_pass_age_seconds", &db, h.get::<_, Option<f64>>(1).unwrap_or(f64::INFINITY));
    Family::new(&mut out, "jobq_reaper_last_pass_duration_seconds", "gauge", "How long the last reap pass took.")
        .sample("jobq_reaper_last_pass_duration_seconds", &db, h.get::<_, Option<f64>>(2).map(|ms| ms / 1000.0).unwrap_or(0.0));
    Family::new(&mut out, "jobq_reaper_last_pass_failed", "gauge", "1 when the last reap pass failed (its error is on the dashboard's health page), else 0.")
        .sample("jobq_reaper_last_pass_failed", &db, if h.get::<_, bool>(3) { 1.0 } else { 0.0 });
    Family::new(
        &mut out,
        "jobq_horizon_transaction_age_seconds",
        "gauge",
        "Age of the oldest transaction of this database (or prepared transaction) holding back the vacuum horizon; 0 when none.",
    )
    .sample("jobq_horizon_transaction_age_seconds", &db, h.get(4));
    Family::new(&mut out, "jobq_horizon_xmin_age_transactions", "gauge", "Transactions since the oldest snapshot still held began (age of the horizon's xmin).")
        .sample("jobq_horizon_xmin_age_transactions", &db, h.get(5));
    {
        let mut f = Family::new(
            &mut out,
            "jobq_horizon_holder_info",
            "gauge",
            "1 for what holds the vacuum horizon: a session (its pid, role and state), a replication slot or a prepared transaction; no sample when nothing does.",
        );
        if let Some(holder) = h.get::<_, Option<String>>(7) {
            let text = |i: usize| h.get::<_, Option<String>>(i).unwrap_or_default();
            let (pid, role, state) = (text(8), text(9), text(10));
            f.sample("jobq_horizon_holder_info", &[db[0], ("holder", &holder), ("pid", &pid), ("role", &role), ("state", &state)], 1.0);
        }
    }
    Family::new(&mut out, "jobq_notify_queue_usage_ratio", "gauge", "Share of the server's NOTIFY queue in use (0 to 1).")
        .sample("jobq_notify_queue_usage_ratio", &db, h.get::<_, Option<f64>>(6).unwrap_or(0.0));

    // jobq's tables: dead rows' share (statistics the server keeps).
    {
        let mut f = Family::new(&mut out, "jobq_table_dead_rows_ratio", "gauge", "Share of dead row versions in each of jobq's tables (0 to 1), from the server's statistics.");
        for r in &tables {
            f.sample("jobq_table_dead_rows_ratio", &[("table", &r.get::<_, String>(0))], r.get(1));
        }
    }
    {
        let mut f = Family::new(&mut out, "jobq_table_dead_rows", "gauge", "Dead row versions in each of jobq's tables, from the server's statistics.");
        for r in &tables {
            f.sample("jobq_table_dead_rows", &[("table", &r.get::<_, String>(0))], r.get::<_, i64>(2) as f64);
        }
    }

    // Concurrency slots in use and keys at their limit (keys may be many: not one series each).
    {
        let mut f = Family::new(&mut out, "jobq_concurrency_slots_in_use", "gauge", "Concurrency slots held by executing jobs, by kind of key.");
        for r in &slots {
            f.sample("jobq_concurrency_slots_in_use", &[("kind", &r.get::<_, String>(0))], r.get::<_, i64>(1) as f64);
        }
    }
    {
        let mut f = Family::new(&mut out, "jobq_concurrency_keys_full", "gauge", "Concurrency keys with every slot taken, by kind of key.");
        for r in &slots {
            f.sample("jobq_concurrency_keys_full", &[("kind", &r.get::<_, String>(0))], r.get::<_, i64>(2) as f64);
        }
    }

    // Rate limits (set by an administrator: few keys): starts in the current window.
    {
        let mut f = Family::new(&mut out, "jobq_rate_window_starts", "gauge", "Starts in the rate key's current window.");
        for r in &rates {
            f.sample("jobq_rate_window_starts", &[("key", &r.get::<_, String>(0))], r.get::<_, i64>(1) as f64);
        }
    }
    {
        let mut f = Family::new(&mut out, "jobq_rate_window_max_starts", "gauge", "The rate key's limit of starts per window.");
        for r in &rates {
            f.sample("jobq_rate_window_max_starts", &[("key", &r.get::<_, String>(0))], r.get::<_, i32>(2) as f64);
        }
    }

    // Schedules: how late the next tick is (0 while it is in the future).
    {
        let mut f = Family::new(&mut out, "jobq_schedule_lateness_seconds", "gauge", "How far the schedule's next tick is past due (0 while it is in the future).");
        for r in &schedules {
            f.sample("jobq_schedule_lateness_seconds", &[("schedule", &r.get::<_, String>(0))], r.get(1));
        }
    }
    Ok(out)
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
        let mut out = String::new();
        let mut f = Family::new(&mut out, "x_seconds", "histogram", "h");
        histogram(&mut f, "x_seconds", "q", &[1.0, 500.0, f64::INFINITY], &[2, 0, 1], 3_500_000);
        assert_eq!(
            out,
            "# HELP x_seconds h\n# TYPE x_seconds histogram\n\
             x_seconds_bucket{queue=\"q\",le=\"0.001\"} 2\nx_seconds_bucket{queue=\"q\",le=\"0.5\"} 2\n\
             x_seconds_bucket{queue=\"q\",le=\"+Inf\"} 3\nx_seconds_sum{queue=\"q\"} 3.5\nx_seconds_count{queue=\"q\"} 3\n"
        );
    }
}
