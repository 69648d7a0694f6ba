//! Recurring jobs: when a schedule's ticks fall. The schedules themselves, and the enqueue of
//! their due ticks in the reap pass, are SQL (`src/sql/schedules.sql`); this module answers the
//! one question SQL cannot: given a cron expression and an IANA time zone, which instant is
//! the next tick (or the latest one so far).
//!
//! Parsing and the calendar walk are the `croner` crate's (POSIX/Vixie cron, optional seconds
//! field, `@hourly`-style nicknames); time zones are `chrono-tz`'s copy of the IANA database.
//! Daylight-saving rules, as croner applies them and as the contract asks (exactly one tick each):
//! - a wall-clock time that a spring-forward skips: a schedule of fixed times (one second,
//!   minute and hour) runs once at the first instant after the gap; a wildcard or stepped
//!   schedule keeps its pace in elapsed time and has no tick inside the gap;
//! - a wall-clock time that a fall-back repeats: one tick, at its first instant. croner gives
//!   wildcard schedules both instants; jobq drops the second (`is_repeat`), so an hourly
//!   schedule has one tick at 01:00 on the night the clock goes back, not two.
use chrono::{DateTime, LocalResult, TimeZone, Utc};
use chrono_tz::Tz;
use croner::parser::{CronParser, Seconds, Year};
use croner::Cron;
use pgrx::prelude::*;

/// Microseconds between the Unix epoch and PostgreSQL's (2000-01-01 UTC).
const PG_EPOCH_UNIX_MICROS: i64 = 946_684_800_000_000;

/// A parsed schedule: its expression and its zone.
pub(crate) struct Schedule {
    cron: Cron,
    tz: Tz,
}

impl Schedule {
    /// Parses `expr` (five fields, six with a leading seconds field, or a nickname) in zone
    /// `tz`. A pattern that parses but never matches (`0 0 30 2 *`) is found by the search for
    /// its next tick (`next_after`), which is how jobq_schedule refuses it.
    pub(crate) fn parse(expr: &str, tz: &str) -> Result<Schedule, String> {
        let expr = expr.trim();
        let fields = expr.split_whitespace().count();
        if expr.starts_with('@') {
            let nick = expr.to_ascii_lowercase();
            if !["@yearly", "@annually", "@monthly", "@weekly", "@daily", "@hourly"].contains(&nick.as_str()) {
                return Err(format!("unknown cron nickname \"{expr}\" (use @yearly, @annually, @monthly, @weekly, @daily or @hourly)"));
            }
        } else if fields != 5 && fields != 6 {
            return Err(format!(
                "cron expression \"{expr}\" has {fields} fields: it needs five (minute hour day-of-month month day-of-week) or six (seconds first)"
            ));
        }
        let cron = CronParser::builder()
            .seconds(Seconds::Optional)
            .year(Year::Disallowed)
            .build()
            .parse(expr)
            .map_err(|e| format!("invalid cron expression \"{expr}\": {e}"))?;
        let tz: Tz = tz.parse().map_err(|_| format!("unknown time zone \"{tz}\" (use an IANA name such as Europe/Paris or UTC)"))?;
        Ok(Schedule { cron, tz })
    }

    /// The first tick strictly after `after`.
    pub(crate) fn next_after(&self, after: DateTime<Utc>) -> Result<DateTime<Utc>, String> {
        let mut t = after.with_timezone(&self.tz);
        loop {
            t = self.cron.find_next_occurrence(&t, false).map_err(|e| e.to_string())?;
            if !self.is_repeat(&t) {
                return Ok(t.with_timezone(&Utc));
            }
        }
    }

    /// The latest tick at or before `upto`.
    pub(crate) fn latest_upto(&self, upto: DateTime<Utc>) -> Result<DateTime<Utc>, String> {
        let mut t = upto.with_timezone(&self.tz);
        let mut inclusive = true;
        loop {
            t = self.cron.find_previous_occurrence(&t, inclusive).map_err(|e| e.to_string())?;
            inclusive = false;
            if !self.is_repeat(&t) {
                return Ok(t.with_timezone(&Utc));
            }
        }
    }

    /// True for the second instant of a wall-clock time the zone repeats (fall-back).
    fn is_repeat(&self, t: &DateTime<Tz>) -> bool {
        matches!(self.tz.from_local_datetime(&t.naive_local()), LocalResult::Ambiguous(first, _) if first != *t)
    }
}

fn to_utc(ts: pg_sys::TimestampTz) -> DateTime<Utc> {
    DateTime::from_timestamp_micros(ts + PG_EPOCH_UNIX_MICROS).expect("a finite timestamptz is in chrono's range")
}

fn to_pg(t: DateTime<Utc>) -> TimestampWithTimeZone {
    TimestampWithTimeZone::try_from(t.timestamp_micros() - PG_EPOCH_UNIX_MICROS).expect("a tick is a valid timestamptz")
}

/// Raises `msg` with SQLSTATE 22023 (invalid_parameter_value).
fn invalid(msg: String) -> ! {
    ereport!(ERROR, PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE, msg);
}

fn parse_or_raise(cron: &str, time_zone: &str) -> Schedule {
    Schedule::parse(cron, time_zone).unwrap_or_else(|msg| invalid(format!("jobq: {msg}")))
}

fn finite(ts: TimestampWithTimeZone, what: &str) -> DateTime<Utc> {
    if !ts.is_finite() {
        invalid(format!("jobq: {what} must be a finite time"));
    }
    to_utc(ts.into())
}

#[pg_schema]
pub mod jobq {
    use super::*;

    /// The first tick of `cron` in `time_zone` strictly after `after`. Raises 22023 for an
    /// invalid expression or zone, or one with no tick after `after` (jobq_schedule's
    /// validation, with `after` = now).
    #[pg_extern(immutable, parallel_safe, name = "_cron_next")]
    pub fn cron_next(cron: &str, time_zone: &str, after: TimestampWithTimeZone) -> TimestampWithTimeZone {
        let s = parse_or_raise(cron, time_zone);
        match s.next_after(finite(after, "after")) {
            Ok(t) => to_pg(t),
            Err(e) => invalid(format!("jobq: cron expression \"{cron}\" never comes due after {after} ({e})")),
        }
    }

    /// The latest tick of `cron` in `time_zone` at or before `upto`.
    #[pg_extern(immutable, parallel_safe, name = "_cron_latest")]
    pub fn cron_latest(cron: &str, time_zone: &str, upto: TimestampWithTimeZone) -> TimestampWithTimeZone {
        let s = parse_or_raise(cron, time_zone);
        match s.latest_upto(finite(upto, "upto")) {
            Ok(t) => to_pg(t),
            Err(e) => invalid(format!("jobq: no tick of \"{cron}\" before {upto}: {e}")),
        }
    }
}

/// The parser's edge cases, in plain Rust (no PostgreSQL needed).
#[cfg(test)]
mod tests {
    use super::Schedule;
    use chrono::{DateTime, Utc};

    fn utc(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    /// The first `n` ticks after `from`, as RFC 3339 UTC strings.
    fn ticks(expr: &str, tz: &str, from: &str, n: usize) -> Vec<String> {
        let s = Schedule::parse(expr, tz).unwrap();
        let mut t = utc(from);
        (0..n)
            .map(|_| {
                t = s.next_after(t).unwrap();
                t.format("%Y-%m-%dT%H:%M:%SZ").to_string()
            })
            .collect()
    }

    #[test]
    fn five_fields_six_fields_and_nicknames() {
        assert_eq!(ticks("*/15 * * * *", "UTC", "2026-01-01T00:07:00Z", 2), ["2026-01-01T00:15:00Z", "2026-01-01T00:30:00Z"]);
        assert_eq!(ticks("*/5 * * * * *", "UTC", "2026-01-01T00:00:00Z", 2), ["2026-01-01T00:00:05Z", "2026-01-01T00:00:10Z"]);
        assert_eq!(ticks("@hourly", "UTC", "2026-01-01T00:00:00Z", 1), ["2026-01-01T01:00:00Z"]);
        assert_eq!(ticks("@daily", "Europe/Paris", "2026-01-01T00:00:00Z", 1), ["2026-01-01T23:00:00Z"]);
        assert_eq!(ticks("@weekly", "UTC", "2026-01-01T00:00:00Z", 1), ["2026-01-04T00:00:00Z"]); // a Sunday
        assert_eq!(ticks("@monthly", "UTC", "2026-01-15T00:00:00Z", 1), ["2026-02-01T00:00:00Z"]);
        assert_eq!(ticks("@YEARLY", "UTC", "2026-01-15T00:00:00Z", 1), ["2027-01-01T00:00:00Z"]);
        // Lists, ranges, steps, names; day of week 0 and 7 are both Sunday.
        assert_eq!(ticks("0 9-17/4 * * mon-fri", "UTC", "2026-01-02T10:00:00Z", 3), ["2026-01-02T13:00:00Z", "2026-01-02T17:00:00Z", "2026-01-05T09:00:00Z"]);
        assert_eq!(ticks("0 0 * * 0", "UTC", "2026-01-01T00:00:00Z", 1), ticks("0 0 * * 7", "UTC", "2026-01-01T00:00:00Z", 1));
        assert_eq!(ticks("0 0 1,15 jan *", "UTC", "2026-01-01T00:00:00Z", 2), ["2026-01-15T00:00:00Z", "2027-01-01T00:00:00Z"]);
        // Day of month and day of week both restricted: either matches (Vixie cron).
        assert_eq!(ticks("0 0 13 * fri", "UTC", "2026-02-01T00:00:00Z", 3), ["2026-02-06T00:00:00Z", "2026-02-13T00:00:00Z", "2026-02-20T00:00:00Z"]);
        // February 29th: leap years only.
        assert_eq!(ticks("0 0 29 2 *", "UTC", "2026-01-01T00:00:00Z", 1), ["2028-02-29T00:00:00Z"]);
    }

    #[test]
    fn bad_expressions_and_zones_are_refused() {
        // Refused as jobq_schedule refuses: by the parser, or by the search for the first tick.
        let refused = |expr: &str| Schedule::parse(expr, "UTC").and_then(|s| s.next_after(utc("2026-01-01T00:00:00Z"))).is_err();
        for bad in ["", "* * * *", "* * * * * * *", "61 * * * *", "* 24 * * *", "* * 32 * *", "* * * 13 *", "*/0 * * * *", "x * * * *", "@reboot", "@every 5s", "0 0 30 2 *"] {
            assert!(refused(bad), "{bad:?} was accepted");
        }
        for bad in ["", "Mars/Olympus", "utc+1", "Europe/Paris "] {
            assert!(Schedule::parse("* * * * *", bad).is_err(), "zone {bad:?} was accepted");
        }
        assert!(Schedule::parse("* * * * *", "America/New_York").is_ok());
    }

    #[test]
    fn a_spring_forward_gap_gives_exactly_one_tick() {
        // New York, 2026-03-08: 02:00 EST becomes 03:00 EDT (07:00 UTC).
        // A fixed time inside the gap runs once, at the first instant after it.
        assert_eq!(ticks("30 2 * * *", "America/New_York", "2026-03-07T12:00:00Z", 3), ["2026-03-08T07:00:00Z", "2026-03-09T06:30:00Z", "2026-03-10T06:30:00Z"]);
        // An hourly schedule keeps its pace: 01:00 EST, then 03:00 EDT one hour later.
        assert_eq!(ticks("0 * * * *", "America/New_York", "2026-03-08T05:30:00Z", 3), ["2026-03-08T06:00:00Z", "2026-03-08T07:00:00Z", "2026-03-08T08:00:00Z"]);
        assert_eq!(ticks("*/30 * * * *", "America/New_York", "2026-03-08T06:00:00Z", 3), ["2026-03-08T06:30:00Z", "2026-03-08T07:00:00Z", "2026-03-08T07:30:00Z"]);
    }

    #[test]
    fn a_fall_back_repeat_gives_exactly_one_tick() {
        // New York, 2026-11-01: 02:00 EDT becomes 01:00 EST; 01:00-01:59 happens twice
        // (05:00-05:59 UTC, then 06:00-06:59 UTC).
        assert_eq!(ticks("30 1 * * *", "America/New_York", "2026-10-31T12:00:00Z", 2), ["2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z"]);
        // Hourly: one tick at 01:00 (the first), none at the repeated 01:00, then 02:00 EST.
        assert_eq!(ticks("0 * * * *", "America/New_York", "2026-11-01T03:30:00Z", 3), ["2026-11-01T04:00:00Z", "2026-11-01T05:00:00Z", "2026-11-01T07:00:00Z"]);
        // Every 20 minutes: 01:00, 01:20, 01:40 once each.
        assert_eq!(
            ticks("*/20 * * * *", "America/New_York", "2026-11-01T04:50:00Z", 5),
            ["2026-11-01T05:00:00Z", "2026-11-01T05:20:00Z", "2026-11-01T05:40:00Z", "2026-11-01T07:00:00Z", "2026-11-01T07:20:00Z"]
        );
        // From inside the repeated hour's second pass, the next tick is 02:00 EST.
        assert_eq!(ticks("*/20 * * * *", "America/New_York", "2026-11-01T06:10:00Z", 1), ["2026-11-01T07:00:00Z"]);
    }

    #[test]
    fn the_latest_tick_so_far() {
        let s = Schedule::parse("*/10 * * * *", "UTC").unwrap();
        assert_eq!(s.latest_upto(utc("2026-01-01T00:25:00Z")).unwrap(), utc("2026-01-01T00:20:00Z"));
        assert_eq!(s.latest_upto(utc("2026-01-01T00:20:00Z")).unwrap(), utc("2026-01-01T00:20:00Z"));
        // In the second pass of a repeated hour, the latest tick is the first pass's, never a
        // repeat: 01:20 EDT is 05:20 UTC.
        let s = Schedule::parse("*/20 * * * *", "America/New_York").unwrap();
        assert_eq!(s.latest_upto(utc("2026-11-01T06:30:00Z")).unwrap(), utc("2026-11-01T05:40:00Z"));
        let s = Schedule::parse("30 1 * * *", "America/New_York").unwrap();
        assert_eq!(s.latest_upto(utc("2026-11-01T06:45:00Z")).unwrap(), utc("2026-11-01T05:30:00Z"));
        // A yearly tick five months back.
        let s = Schedule::parse("0 0 1 1 *", "UTC").unwrap();
        assert_eq!(s.latest_upto(utc("2026-06-01T00:00:00Z")).unwrap(), utc("2026-01-01T00:00:00Z"));
    }
}
