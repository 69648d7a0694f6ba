//! The figures a person on call looks at, each with its label, unit, meaning, the thresholds
//! that make it amber or red, and what to do when it is red. The health page (`/health`)
//! colours them with these; each red threshold is also an alert rule of
//! `deploy/prometheus/jobq-alerts.yml`, on the metric named here, at the same value
//! (dash/tests checks that the two agree). docs/monitoring.md lists them.

use crate::db::Edition;

/// How a figure is shown.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Unit {
    Seconds,
    Ratio,
    Jobs,
    /// 1 or 0: shown as yes or no.
    Flag,
}

impl Unit {
    /// Its name in /health.json.
    pub fn name(self) -> &'static str {
        match self {
            Unit::Seconds => "seconds",
            Unit::Ratio => "ratio",
            Unit::Jobs => "jobs",
            Unit::Flag => "flag",
        }
    }
}

/// Ordered: the worst of several levels is their max.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Green,
    Amber,
    Red,
}

impl Level {
    /// The CSS class of its badge.
    pub fn class(self) -> &'static str {
        match self {
            Level::Green => "ok",
            Level::Amber => "warn",
            Level::Red => "bad",
        }
    }

    pub fn word(self) -> &'static str {
        match self {
            Level::Green => "green",
            Level::Amber => "amber",
            Level::Red => "red",
        }
    }
}

pub struct Check {
    /// The alert rule that fires when the figure is red.
    pub alert: &'static str,
    /// The metric of /metrics the rule compares (the health page reads the same source).
    pub metric: &'static str,
    pub label: &'static str,
    pub unit: Unit,
    pub meaning: &'static str,
    /// Amber above this value, red above `red`.
    pub amber: f64,
    pub red: f64,
    pub when_red: &'static str,
    /// What to do when red in the SQL edition, where it differs: there the passes are run by
    /// pg_cron or by the workers' heartbeats, not by a background worker.
    pub when_red_sql: Option<&'static str>,
}

impl Check {
    /// What to do when red, for a database of `edition`.
    pub fn what_to_do(&self, edition: Edition) -> &'static str {
        match (edition, self.when_red_sql) {
            (Edition::Sql, Some(sql)) => sql,
            _ => self.when_red,
        }
    }

    pub fn level(&self, v: f64) -> Level {
        if v > self.red {
            Level::Red
        } else if v > self.amber {
            Level::Amber
        } else {
            Level::Green
        }
    }
}

pub const REAPER_PASS_AGE: Check = Check {
    alert: "JobqReaperStopped",
    metric: "jobq_reaper_last_pass_age_seconds",
    label: "Background worker: time since its last pass",
    unit: Unit::Seconds,
    meaning: "The background worker passes every jobq.reap_interval (1 s by default): it reaps dead workers, requeues their jobs, wakes timed-out awaits, flushes the counters and prunes the history. Without it nothing stalls at once, but jobs of dead workers wait.",
    amber: 10.0,
    red: 60.0,
    when_red: "Check that jobq is in shared_preload_libraries and that this database is served (jobq.database names it or is empty, jobq.max_databases leaves room); the server log says why the worker stopped. SELECT * FROM jobq_reap() runs a pass by hand meanwhile.",
    when_red_sql: Some("The SQL edition has no background worker: its passes run when pg_cron runs them (SELECT jobq_schedule_passes(), or cron.schedule_in_database from pg_cron's database; see cron.job_run_details for its runs) or in the heartbeats of running workers. Check that one of them runs; SELECT * FROM jobq_reap() runs a pass by hand meanwhile."),
};

pub const REAPER_PASS_FAILED: Check = Check {
    alert: "JobqReaperFailing",
    metric: "jobq_reaper_last_pass_failed",
    label: "Background worker: last pass failed",
    unit: Unit::Flag,
    meaning: "1 when the worker's last pass ended in an error (shown below), else 0.",
    amber: 0.0,
    red: 0.5,
    when_red: "Read last_pass_error below and the server log; a pass that fails keeps failing until its cause is removed (a lock held on jobq's tables, a full disk).",
    when_red_sql: None,
};

pub const HORIZON_AGE: Check = Check {
    alert: "JobqHorizonHeld",
    metric: "jobq_horizon_transaction_age_seconds",
    label: "Oldest transaction holding the vacuum horizon",
    unit: Unit::Seconds,
    meaning: "While a transaction of this database (or a replication slot, or a prepared transaction) stays open, vacuum cannot remove the row versions jobs leave behind: jobq's tables and indexes grow and checkout slows.",
    amber: 300.0,
    red: 900.0,
    when_red: "Find the session below (pid, role, state); if it should not be open, end it: SELECT pg_terminate_backend(pid). idle in transaction sessions are the usual cause (set idle_in_transaction_session_timeout).",
    when_red_sql: None,
};

/// Dead rows count only in a table with more than this many: a quiet queue's small tables
/// may be mostly dead rows that autovacuum has no reason to remove yet.
pub const DEAD_ROWS_MIN: i64 = 10_000;

pub const DEAD_ROWS: Check = Check {
    alert: "JobqDeadRowsHigh",
    metric: "jobq_table_dead_rows_ratio",
    label: "Dead row versions in jobq's tables",
    unit: Unit::Ratio,
    meaning: "The share of row versions vacuum has not removed yet, in the worst of jobq's tables with more than 10,000 of them (per table below).",
    amber: 0.2,
    red: 0.5,
    when_red: "Usually the horizon is held (above): end the session holding it. Otherwise autovacuum lags: VACUUM (VERBOSE) jobq.<table> and check autovacuum_max_workers.",
    when_red_sql: None,
};

pub const QUEUE_WAIT: Check = Check {
    alert: "JobqQueueBackingUp",
    metric: "jobq_queue_oldest_ready_age_seconds",
    label: "Longest wait of a due job (any queue)",
    unit: Unit::Seconds,
    meaning: "How long the oldest ready, due job has waited for a worker since it was due (in a queue not paused, when the role may read jobq.pauses).",
    amber: 60.0,
    red: 300.0,
    when_red: "Workers are too few, stopped, or do not serve that queue: check /workers and the queue's page (is it paused? are its jobs held back by a concurrency or rate key?).",
    when_red_sql: None,
};

pub const JOBS_DYING: Check = Check {
    alert: "JobqJobsDying",
    metric: "jobq_jobs_dead_total",
    label: "Jobs that died in the last 10 minutes",
    unit: Unit::Jobs,
    meaning: "Jobs that became dead: their attempts ran out or a handler discarded them.",
    amber: 0.0,
    red: 5.0,
    when_red: "Open /jobs?state=dead: the last error of each says why; jobq_retry(id) runs one again once the cause is fixed.",
    when_red_sql: None,
};

pub const SCHEDULE_LATENESS: Check = Check {
    alert: "JobqScheduleBehind",
    metric: "jobq_schedule_lateness_seconds",
    label: "Most late schedule tick",
    unit: Unit::Seconds,
    meaning: "How far the most overdue schedule's next tick is past its time: the background worker enqueues ticks as they fall due.",
    amber: 30.0,
    red: 120.0,
    when_red: "The background worker is not passing (above), or its passes fail; a tick is enqueued at the next pass once it runs again.",
    when_red_sql: Some("The passes are not running (above), or they fail: in the SQL edition a tick is enqueued by the next pass that pg_cron or a worker's heartbeat runs."),
};

pub const NOTIFY_QUEUE: Check = Check {
    alert: "JobqNotifyQueueFilling",
    metric: "jobq_notify_queue_usage_ratio",
    label: "NOTIFY queue in use",
    unit: Unit::Ratio,
    meaning: "The server's queue of notifications (the wake-ups of listening workers) fills when a session LISTENs and never reads; full, every NOTIFY (and enqueue) fails.",
    amber: 0.5,
    red: 0.9,
    when_red: "Find the session that listens and does not read (pg_stat_activity, state idle in transaction, a LISTEN in its query) and end it.",
    when_red_sql: None,
};

/// Every figure, in the order the health page shows them.
pub const ALL: [&Check; 8] = [
    &REAPER_PASS_AGE,
    &REAPER_PASS_FAILED,
    &QUEUE_WAIT,
    &JOBS_DYING,
    &SCHEDULE_LATENESS,
    &HORIZON_AGE,
    &DEAD_ROWS,
    &NOTIFY_QUEUE,
];

#[cfg(test)]
mod unit {
    use super::*;

    #[test]
    fn levels_are_amber_then_red_above_their_thresholds() {
        assert_eq!(QUEUE_WAIT.level(60.0), Level::Green);
        assert_eq!(QUEUE_WAIT.level(61.0), Level::Amber);
        assert_eq!(QUEUE_WAIT.level(301.0), Level::Red);
        assert_eq!(REAPER_PASS_FAILED.level(1.0), Level::Red);
        assert_eq!(REAPER_PASS_FAILED.level(0.0), Level::Green);
        assert_eq!(JOBS_DYING.level(1.0), Level::Amber);
    }

    #[test]
    fn what_to_do_follows_the_edition() {
        assert_eq!(QUEUE_WAIT.what_to_do(Edition::Sql), QUEUE_WAIT.when_red);
        assert_eq!(REAPER_PASS_AGE.what_to_do(Edition::Extension), REAPER_PASS_AGE.when_red);
        let sql = REAPER_PASS_AGE.what_to_do(Edition::Sql);
        assert!(sql.contains("pg_cron") && sql.contains("jobq_reap()") && !sql.contains("shared_preload_libraries"), "{sql}");
        for c in ALL {
            // Nothing the SQL edition's advice says may send someone to the library.
            assert!(!c.what_to_do(Edition::Sql).contains("shared_preload_libraries"), "{}", c.alert);
        }
    }
}
