//! What a failed connection says, in the words psql would print: the server it tried, then the
//! server's own message (`FATAL:  password authentication failed for user "x"`), or what the
//! client could not do (connection refused, a timeout, an invalid connection string), rather
//! than the client library's summary ("db error", "invalid configuration").

use deadpool_postgres::{HookError, PoolError, TimeoutType};
use std::error::Error;
use tokio_postgres::config::Host;

/// The server(s) a connection string names, as psql names them: `at "db.example.com", port
/// 5432` or `on socket "/run/postgresql/.s.PGSQL.5432"`, joined with "or".
pub fn servers(pg: &tokio_postgres::Config) -> String {
    let hosts: Vec<String> = pg
        .get_hosts()
        .iter()
        .map(|h| match h {
            Host::Tcp(h) => h.clone(),
            Host::Unix(p) => p.display().to_string(),
        })
        .collect();
    let hosts = if hosts.is_empty() {
        pg.get_hostaddrs().iter().map(|a| a.to_string()).collect()
    } else {
        hosts
    };
    let port = |i: usize| pg.get_ports().get(i).or(pg.get_ports().first()).copied().unwrap_or(5432);
    hosts
        .iter()
        .enumerate()
        .map(|(i, h)| {
            if h.starts_with('/') {
                format!("on socket \"{h}/.s.PGSQL.{}\"", port(i))
            } else {
                format!("at \"{h}\", port {}", port(i))
            }
        })
        .collect::<Vec<_>>()
        .join(" or ")
}

/// An error and its causes, each after a colon ("invalid connection string: unknown option
/// `prot`"): this client library's errors say their cause only there.
pub fn chain(e: &(dyn Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let said = c.to_string();
        if !out.ends_with(&said) {
            out = format!("{out}: {said}");
        }
        cause = c.source();
    }
    out
}

/// A failed connection (or the first statement on it) as psql says it.
pub fn connection(e: &tokio_postgres::Error, pg: &tokio_postgres::Config) -> String {
    let at = if pg.get_hosts().is_empty() && pg.get_hostaddrs().is_empty() {
        return "no host in the connection string: give host=… (or postgres://HOST/…)".into();
    } else {
        format!("connection to server {} failed", servers(pg))
    };
    if let Some(db) = e.as_db_error() {
        let mut out = format!("{at}: {}:  {}", db.severity(), db.message());
        if let Some(d) = db.detail() {
            out.push_str(&format!("\nDETAIL:  {d}"));
        }
        if let Some(h) = db.hint() {
            out.push_str(&format!("\nHINT:  {h}"));
        }
        return out;
    }
    let io = e.source().and_then(|s| s.downcast_ref::<std::io::Error>());
    match (io.map(|io| io.kind()), e.source().map(|s| s.to_string())) {
        (Some(std::io::ErrorKind::ConnectionRefused), _) => format!(
            "{at}: Connection refused: is the server running on that host and accepting TCP/IP connections?"
        ),
        (_, Some(s)) if s == "password missing" => {
            format!("{at}: the server asks for a password and the connection string gives none")
        }
        (_, Some(s)) if io.is_some() => format!("{at}: {s}"),
        _ => format!("{at}: {}", chain(e)),
    }
}

/// A connection the pool could not make, as `connection` says it.
pub fn pool(e: &PoolError, pg: &tokio_postgres::Config) -> String {
    match e {
        PoolError::Backend(e) | PoolError::PostCreateHook(HookError::Backend(e)) => connection(e, pg),
        PoolError::Timeout(TimeoutType::Wait) => {
            "every connection of the pool (--pool-size) stayed busy: none was free in time".into()
        }
        PoolError::Timeout(_) => format!("connection to server {} failed: no answer in time", servers(pg)),
        e => e.to_string(),
    }
}
