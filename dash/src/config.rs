//! Flags and environment: what the dashboard connects to, where it listens, who may see it.

use clap::Parser;
use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Duration;

#[derive(Parser, Debug, Clone)]
#[command(
    name = "jobq-dash",
    version,
    about = "The jobq dashboard: queues, jobs, workers, locks, schedules, rate limits and health"
)]
pub struct Config {
    /// The database where jobq is installed: a libpq-style URL (postgres://user@host/db) or a
    /// key=value string (host=… user=… dbname=…). The role it connects as decides what the
    /// dashboard may do: jobq_reader reads, jobq_admin may also retry, cancel, pause and resume.
    #[arg(long, env = "JOBQ_DASH_DATABASE_URL", hide_env_values = true)]
    pub database_url: String,

    /// Address to listen on (host:port).
    #[arg(long, env = "JOBQ_DASH_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: String,

    /// Path prefix the dashboard is served under (behind a reverse proxy), e.g. /jobq.
    #[arg(long, env = "JOBQ_DASH_BASE_PATH", default_value = "/")]
    pub base_path: String,

    /// user:password required of every request (HTTP basic auth). Required unless the listen
    /// address is a loopback address.
    #[arg(long, env = "JOBQ_DASH_BASIC_AUTH", hide_env_values = true)]
    pub basic_auth: Option<String>,

    /// Show no actions and refuse them, whatever the database role may do.
    #[arg(long, env = "JOBQ_DASH_READ_ONLY")]
    pub read_only: bool,

    /// Never read payloads, results or errors of jobs.
    #[arg(long, env = "JOBQ_DASH_HIDE_PAYLOADS")]
    pub hide_payloads: bool,

    /// statement_timeout of every connection (e.g. 2s, 500ms).
    #[arg(long, env = "JOBQ_DASH_QUERY_TIMEOUT", default_value = "2s", value_parser = parse_duration)]
    pub query_timeout: Duration,

    /// A payload filter searches the newest this many jobs (by id) only: no index serves it
    /// (one on payloads would cost every enqueue), and over a long history a full scan takes
    /// seconds (bench/dash.sh: 1.9 s at 10 million jobs).
    #[arg(long, env = "JOBQ_DASH_PAYLOAD_WINDOW", default_value_t = 200_000)]
    pub payload_window: i64,

    /// Connections kept to the database at most.
    #[arg(long, env = "JOBQ_DASH_POOL_SIZE", default_value_t = 8)]
    pub pool_size: usize,
}

/// `2s`, `500ms`, `1m`, or a bare number of seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, unit) = match s.find(|c: char| !(c.is_ascii_digit() || c == '.')) {
        Some(i) => (&s[..i], s[i..].trim()),
        None => (s, "s"),
    };
    let n: f64 = num
        .parse()
        .map_err(|_| format!("not a duration: {s:?} (try 2s or 500ms)"))?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "s" => n,
        "m" | "min" => n * 60.0,
        _ => return Err(format!("unknown unit in {s:?} (ms, s or m)")),
    };
    if !(secs > 0.0 && secs < 86_400.0) {
        return Err(format!(
            "{s:?} is out of range (more than 0, less than a day)"
        ));
    }
    Ok(Duration::from_secs_f64(secs))
}

impl Config {
    /// Checks what clap cannot: the basic auth rule, the credentials' shape, the base path.
    /// main() refuses to start when this fails.
    pub fn validate(&self) -> Result<(), String> {
        if let Some(auth) = &self.basic_auth {
            match auth.split_once(':') {
                Some((u, p)) if !u.is_empty() && !p.is_empty() => {}
                _ => return Err("--basic-auth must be user:password, both non-empty".into()),
            }
        } else if !self.listens_on_loopback_only()? {
            return Err(format!(
                "refusing to listen on {} without authentication: set --basic-auth user:password \
                 (or JOBQ_DASH_BASIC_AUTH), or listen on a loopback address such as 127.0.0.1:8080",
                self.listen
            ));
        }
        if !self.base_path.starts_with('/') {
            return Err(format!(
                "--base-path must start with /: {:?}",
                self.base_path
            ));
        }
        Ok(())
    }

    /// True when every address `listen` resolves to is a loopback address.
    pub fn listens_on_loopback_only(&self) -> Result<bool, String> {
        let addrs: Vec<SocketAddr> = self
            .listen
            .to_socket_addrs()
            .map_err(|e| format!("--listen {:?}: {e}", self.listen))?
            .collect();
        Ok(!addrs.is_empty() && addrs.iter().all(|a| a.ip().is_loopback()))
    }

    /// The base path without its trailing slash: "" for "/", "/jobq" for "/jobq/". Every link
    /// is `prefix() + "/path"`.
    pub fn prefix(&self) -> String {
        self.base_path.trim_end_matches('/').to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(args: &[&str]) -> Config {
        let mut all = vec!["jobq-dash", "--database-url", "host=x"];
        all.extend_from_slice(args);
        Config::try_parse_from(all).unwrap()
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("2s").unwrap(), Duration::from_secs(2));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("3").unwrap(), Duration::from_secs(3));
        assert!(parse_duration("0s").is_err());
        assert!(parse_duration("2h").is_err());
    }

    #[test]
    fn basic_auth_is_required_off_loopback() {
        assert!(cfg(&[]).validate().is_ok());
        assert!(cfg(&["--listen", "[::1]:9000"]).validate().is_ok());
        let err = cfg(&["--listen", "0.0.0.0:8080"]).validate().unwrap_err();
        assert!(err.contains("--basic-auth"), "{err}");
        assert!(cfg(&["--listen", "0.0.0.0:8080", "--basic-auth", "a:b"])
            .validate()
            .is_ok());
        assert!(cfg(&["--basic-auth", "nocolon"]).validate().is_err());
    }

    #[test]
    fn prefixes() {
        assert_eq!(cfg(&[]).prefix(), "");
        assert_eq!(cfg(&["--base-path", "/jobq/"]).prefix(), "/jobq");
        assert!(cfg(&["--base-path", "jobq"]).validate().is_err());
    }
}
