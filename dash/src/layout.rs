//! The page around every page (nav bar, style sheet), the error page, and how numbers, ages
//! and durations are written.

use crate::auth::{CsrfToken, CSRF_FIELD};
use crate::db::{Access, AppError};
use crate::App;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use maud::{html, Markup, PreEscaped, DOCTYPE};

const STYLE: &str = r#"
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#1d2330;background:#f5f6f8}
nav{display:flex;gap:2px;align-items:center;background:#1f2937;padding:0 16px;flex-wrap:wrap}
nav a{color:#d1d5db;text-decoration:none;padding:12px 10px}
nav a:hover,nav a.on{color:#fff;background:#374151}
nav .brand{font-weight:700;color:#fff;margin-right:12px}
nav .who{margin-left:auto;color:#9ca3af;font-size:12px}
nav .dbs{color:#9ca3af;font-size:12px;margin-left:12px}nav .dbs a{padding:12px 6px}
main{padding:16px 20px;max-width:1400px}
h1{font-size:20px;margin:4px 0 14px}h2{font-size:16px;margin:22px 0 8px}
table{border-collapse:collapse;background:#fff;border:1px solid #e5e7eb;margin-bottom:10px}
th,td{padding:5px 10px;border-bottom:1px solid #eef0f3;text-align:left;vertical-align:top}
th{background:#f9fafb;font-weight:600;font-size:12px;color:#4b5563}
td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}
tr.bad td{background:#fef2f2}tr.warn td{background:#fffbeb}
.badge{display:inline-block;padding:0 6px;border-radius:8px;font-size:12px;background:#e5e7eb}
.badge.bad{background:#fee2e2;color:#991b1b}.badge.warn{background:#fef3c7;color:#92400e}.badge.ok{background:#d1fae5;color:#065f46}
.muted{color:#6b7280}.err{color:#991b1b}
.msg{padding:8px 12px;border-radius:4px;background:#ecfdf5;border:1px solid #a7f3d0;margin-bottom:12px}
.msg.bad{background:#fef2f2;border-color:#fecaca}
pre{background:#fff;border:1px solid #e5e7eb;padding:8px;overflow:auto;max-height:420px;margin:0}
form.inline{display:inline}
button{font:inherit;padding:3px 10px;border:1px solid #9ca3af;border-radius:4px;background:#fff;cursor:pointer}
button.danger{border-color:#dc2626;color:#991b1b}
input,select{font:inherit;padding:3px 6px;border:1px solid #cbd5e1;border-radius:4px}
.filters{display:flex;gap:8px;flex-wrap:wrap;align-items:end;margin-bottom:12px}
.filters label{display:flex;flex-direction:column;font-size:12px;color:#4b5563}
.charts{display:flex;gap:12px;flex-wrap:wrap}
.chart{background:#fff;border:1px solid #e5e7eb;padding:6px 8px}
.chart .t{font-size:12px;color:#4b5563}
.legend span{font-size:11px;margin-right:8px}
.legend i{display:inline-block;width:10px;height:3px;margin-right:3px;vertical-align:middle}
.kv th{width:220px}
.name{display:inline-block;max-width:16em;overflow:hidden;text-overflow:ellipsis;white-space:nowrap;vertical-align:top}
h1,h2,p,.kv td,td.err,nav .who{overflow-wrap:anywhere}
"#;

/// The nav bar's entries: (path, label).
const NAV: &[(&str, &str)] = &[
    ("/", "Overview"),
    ("/jobs", "Jobs"),
    ("/workers", "Workers"),
    ("/locks", "Locks & keys"),
    ("/schedules", "Schedules"),
    ("/rate-limits", "Rate limits"),
    ("/events", "Events"),
    ("/health", "Health"),
];

/// A whole HTML page: nav bar (with `active` highlighted), the database's jobq (release and
/// edition) and who the dashboard is connected as, and `body`.
pub fn page(app: &App, access: Option<&Access>, active: &str, title: &str, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · jobq" }
                // No icon: else every page asks for /favicon.ico and logs its 404.
                link rel="icon" href="data:,";
                style { (PreEscaped(STYLE)) }
            }
            body {
                nav {
                    a.brand href=(app.link("/")) { "jobq" }
                    @for (path, label) in NAV {
                        a.on[*path == active] href=(app.link(path)) { (label) }
                    }
                    // Several databases: one link each, to the same page of that database.
                    @if app.dbs.len() > 1 {
                        span.dbs {
                            "database"
                            @for db in &app.dbs {
                                a.on[db.name == app.db.name] href=(format!("{}{}", app.db_home(&db.name).trim_end_matches('/'), if active == "/" { "/" } else { active })) { (name(&db.name)) }
                            }
                        }
                    }
                    @if let Some(a) = access {
                        span.who {
                            // Which jobq this database has: "jobq 0.5.0 (SQL edition)".
                            (a.jobq.label()) " · "
                            "connected as " (a.user) " · "
                            @if app.may_act(a) { "may act" }
                            @else if app.cfg.read_only { "read-only (--read-only)" }
                            @else { "read-only (not jobq_admin)" }
                        }
                    }
                }
                main { h1 { (title) } (body) }
            }
        }
    }
}

/// A name (of a queue, kind, key, lock, schedule, worker…) where it shares a line or a table
/// row: it may be 1,000 bytes with nowhere to break a line, so it is cut with an ellipsis past
/// 16em and is whole in its title (the tooltip). Longer text that is not a name (headings,
/// paragraphs, errors, a job's columns) wraps instead (STYLE, `overflow-wrap`).
pub fn name(s: &str) -> Markup {
    html! { span.name title=(s) { (s) } }
}

/// A form with one button that POSTs an action, carrying the CSRF token.
pub fn action_button(
    action: &str,
    csrf: &CsrfToken,
    label: &str,
    danger: bool,
    hidden: &[(&str, &str)],
) -> Markup {
    html! {
        form.inline method="post" action=(action) {
            input type="hidden" name=(CSRF_FIELD) value=(csrf.0);
            @for (k, v) in hidden { input type="hidden" name=(k) value=(v); }
            button.danger[danger] type="submit" { (label) }
        }
    }
}

/// The error page of a failed request: 403 for what the dashboard or the database refused
/// (SQLSTATE 42501), 400 for input the database refused as data (class 22: a name over 1,000
/// bytes, a value out of range), 504 for a statement timeout, 503 without a database.
impl IntoResponse for AppError {
    fn into_response(self) -> Response {
        let (status, title, detail) = match &self {
            AppError::Db(e) => {
                let code = self.sqlstate().unwrap_or("");
                let msg = e
                    .as_db_error()
                    .map(|d| d.message().to_string())
                    .unwrap_or_else(|| e.to_string());
                match code {
                    "42501" => (StatusCode::FORBIDDEN, "Refused by the database", format!("{msg} (SQLSTATE 42501): the role the dashboard connects as lacks this privilege")),
                    c if c.starts_with("22") => (StatusCode::BAD_REQUEST, "Bad request", format!("{msg} (SQLSTATE {code})")),
                    "57014" => (StatusCode::GATEWAY_TIMEOUT, "Query timed out", format!("{msg} (SQLSTATE 57014): the query ran longer than --query-timeout")),
                    "" => (StatusCode::SERVICE_UNAVAILABLE, "Database error", msg),
                    _ => (StatusCode::INTERNAL_SERVER_ERROR, "Database error", format!("{msg} (SQLSTATE {code})")),
                }
            }
            AppError::Unavailable(m) => (
                StatusCode::SERVICE_UNAVAILABLE,
                "Database unavailable",
                m.clone(),
            ),
            AppError::Forbidden(m) => (StatusCode::FORBIDDEN, "Forbidden", m.clone()),
            AppError::NotFound(m) => (StatusCode::NOT_FOUND, "Not found", m.clone()),
            AppError::BadRequest(m) => (StatusCode::BAD_REQUEST, "Bad request", m.clone()),
        };
        let body = html! {
            (DOCTYPE)
            html lang="en" {
                head { meta charset="utf-8"; title { (title) " · jobq" } style { (PreEscaped(STYLE)) } }
                body { main { h1 { (title) } p.msg.bad { (detail) } p { a href="javascript:history.back()" { "Back" } } } }
            }
        };
        (status, body).into_response()
    }
}

/// 1234567 → "1,234,567".
pub fn num(n: i64) -> String {
    let digits = n.unsigned_abs().to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    if n < 0 {
        format!("-{out}")
    } else {
        out
    }
}

/// A duration in seconds, short: "250 ms", "3 s", "5 min", "2 h 5 min", "3 d 4 h".
pub fn dur(secs: f64) -> String {
    let s = secs.abs();
    if s < 1.0 {
        format!("{:.0} ms", s * 1000.0)
    } else if s < 60.0 {
        format!("{s:.0} s")
    } else if s < 3600.0 {
        format!("{} min", (s / 60.0) as i64)
    } else if s < 86_400.0 {
        format!(
            "{} h {} min",
            (s / 3600.0) as i64,
            ((s % 3600.0) / 60.0) as i64
        )
    } else {
        format!(
            "{} d {} h",
            (s / 86_400.0) as i64,
            ((s % 86_400.0) / 3600.0) as i64
        )
    }
}

/// A configured length of time (a rate limit's window), exactly: "1.5 s", "1 min 30 s",
/// "250 ms", "2 h 5 min", where `dur` rounds to a reading of the right order.
pub fn exact_dur(secs: f64) -> String {
    let us = (secs.abs() * 1e6).round() as i64;
    if us < 1_000_000 {
        return format!("{} ms", trim(us as f64 / 1e3));
    }
    let (d, h, m) = (us / 86_400_000_000, us / 3_600_000_000 % 24, us / 60_000_000 % 60);
    let s = (us % 60_000_000) as f64 / 1e6;
    let mut parts: Vec<String> = [(d, "d"), (h, "h"), (m, "min")]
        .iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, unit)| format!("{n} {unit}"))
        .collect();
    if s > 0.0 {
        parts.push(format!("{} s", trim(s)));
    }
    parts.join(" ")
}

/// A number with at most six decimals and none that are zero at the end ("1.5", "30", "0.25").
fn trim(x: f64) -> String {
    let t = format!("{x:.6}");
    t.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// Seconds since a moment (negative: it lies ahead) as "3 s ago" or "in 5 min".
pub fn age(secs: Option<f64>) -> String {
    match secs {
        None => "—".into(),
        Some(s) if s >= 0.0 => format!("{} ago", dur(s)),
        Some(s) => format!("in {}", dur(s)),
    }
}

/// Percent-encodes a URL path segment (a queue name may hold any character).
pub fn seg(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert_eq!(num(0), "0");
        assert_eq!(num(999), "999");
        assert_eq!(num(10000), "10,000");
        assert_eq!(num(-1234567), "-1,234,567");
        assert_eq!(age(Some(3.2)), "3 s ago");
        assert_eq!(age(Some(-300.0)), "in 5 min");
        assert_eq!(age(None), "—");
        assert_eq!(dur(0.25), "250 ms");
        assert_eq!(dur(7200.0 + 300.0), "2 h 5 min");
        assert_eq!(seg("a b/c"), "a%20b%2Fc");
    }

    #[test]
    fn configured_lengths_of_time_are_exact() {
        assert_eq!(exact_dur(1.5), "1.5 s");
        assert_eq!(exact_dur(2.5), "2.5 s");
        assert_eq!(exact_dur(90.0), "1 min 30 s");
        assert_eq!(exact_dur(60.0), "1 min");
        assert_eq!(exact_dur(0.25), "250 ms");
        assert_eq!(exact_dur(0.0005), "0.5 ms");
        assert_eq!(exact_dur(7500.0), "2 h 5 min");
        assert_eq!(exact_dur(86_400.0 + 3_600.0 + 61.25), "1 d 1 h 1 min 1.25 s");
    }
}
