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
    /// A database where jobq is installed: a libpq-style URL (postgres://user@host/db) or a
    /// key=value string (host=… user=… dbname=…). The role it connects as decides what the
    /// dashboard may do: jobq_reader reads, jobq_admin may also retry, cancel, pause and resume.
    /// Repeat it to serve several databases, the first at the base path. Without it:
    /// JOBQ_DASH_DATABASE_URL, then JOBQ_DASH_DATABASE_URL_2, _3, … (up to the first unset).
    /// The databases are named by current_database(), or by a `dash_name=NAME` key
    /// (`?dash_name=NAME` in a URL), which the dashboard takes out before connecting.
    #[arg(long = "database-url", value_name = "URL")]
    pub database_url: Vec<String>,

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

    /// Connections kept to each database at most.
    #[arg(long, env = "JOBQ_DASH_POOL_SIZE", default_value_t = 8)]
    pub pool_size: usize,

    /// /metrics exports the rate keys with the most starts in their current window, this many
    /// per database; the others are summed under key="_other".
    #[arg(long, env = "JOBQ_DASH_METRICS_RATE_KEYS", default_value_t = 20)]
    pub metrics_rate_keys: i64,
}

/// The environment variable of the first database; the next ones are `{DATABASE_URL_ENV}_2`, …
pub const DATABASE_URL_ENV: &str = "JOBQ_DASH_DATABASE_URL";

/// The connection strings to serve: the `--database-url` flags, else the environment's
/// JOBQ_DASH_DATABASE_URL, JOBQ_DASH_DATABASE_URL_2, … (read with `env`) up to the first unset.
pub fn database_urls(flags: &[String], env: impl Fn(&str) -> Option<String>) -> Vec<String> {
    if !flags.is_empty() {
        return flags.to_vec();
    }
    let mut urls: Vec<String> = env(DATABASE_URL_ENV).into_iter().collect();
    while !urls.is_empty() {
        match env(&format!("{DATABASE_URL_ENV}_{}", urls.len() + 1)) {
            Some(u) => urls.push(u),
            None => break,
        }
    }
    urls
}

/// The key that names a database on the pages and in /metrics instead of its current_database().
pub const NAME_KEY: &str = "dash_name";

/// Takes `dash_name=NAME` out of a connection string (a `key=value` of a libpq key=value string,
/// or a `?dash_name=NAME` parameter of a URL): the name, if any, and the string without it.
pub fn split_name(conn: &str) -> Result<(Option<String>, String), String> {
    let (name, rest) = if conn.starts_with("postgres://") || conn.starts_with("postgresql://") {
        url_without_name(conn)
    } else {
        key_value_without_name(conn)
    };
    match &name {
        Some(n) if n.is_empty() || !n.bytes().all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b)) => Err(format!(
            "{NAME_KEY}={n:?}: a name is letters, digits, '_', '.' and '-' only, not empty"
        )),
        _ => Ok((name, rest)),
    }
}

fn url_without_name(url: &str) -> (Option<String>, String) {
    let Some((base, query)) = url.split_once('?') else {
        return (None, url.to_string());
    };
    let mut name = None;
    let kept: Vec<&str> = query
        .split('&')
        .filter(|p| match p.strip_prefix(NAME_KEY).and_then(|v| v.strip_prefix('=')) {
            Some(v) => {
                name = Some(v.to_string());
                false
            }
            None => true,
        })
        .collect();
    let rest = if kept.is_empty() { base.to_string() } else { format!("{base}?{}", kept.join("&")) };
    (name, rest)
}

/// libpq's key=value syntax: `key = value` pairs apart by spaces, a value unquoted up to the
/// next space or in single quotes, `\` escaping the next character in either.
fn key_value_without_name(s: &str) -> (Option<String>, String) {
    let b = s.as_bytes();
    let mut i = 0;
    let mut name = None;
    let mut out = String::new();
    let skip_space = |mut i: usize| {
        while i < b.len() && b[i].is_ascii_whitespace() {
            i += 1;
        }
        i
    };
    loop {
        let start = skip_space(i);
        if start >= b.len() {
            break;
        }
        let mut j = start;
        while j < b.len() && b[j] != b'=' && !b[j].is_ascii_whitespace() {
            j += 1;
        }
        let key = &s[start..j];
        j = skip_space(j);
        if j < b.len() && b[j] == b'=' {
            j = skip_space(j + 1);
        }
        let mut value = String::new();
        let quoted = j < b.len() && b[j] == b'\'';
        if quoted {
            j += 1;
        }
        while j < b.len() && !(if quoted { b[j] == b'\'' } else { b[j].is_ascii_whitespace() }) {
            if b[j] == b'\\' && j + 1 < b.len() {
                j += 1;
            }
            let c = s[j..].chars().next().unwrap_or_default();
            value.push(c);
            j += c.len_utf8();
        }
        if quoted && j < b.len() {
            j += 1;
        }
        if key == NAME_KEY {
            name = Some(value);
        } else {
            out.push_str(s[start..j].trim());
            out.push(' ');
        }
        i = j;
    }
    (name, out.trim_end().to_string())
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
        if self.metrics_rate_keys < 0 {
            return Err("--metrics-rate-keys must be 0 or more".into());
        }
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

    #[test]
    fn urls_come_from_flags_else_from_numbered_variables() {
        let env = |vars: &'static [(&'static str, &'static str)]| {
            move |k: &str| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())
        };
        let vars: &[(&str, &str)] = &[
            ("JOBQ_DASH_DATABASE_URL", "host=a"),
            ("JOBQ_DASH_DATABASE_URL_2", "host=b dbname=x"),
            ("JOBQ_DASH_DATABASE_URL_4", "host=d"),
        ];
        assert_eq!(database_urls(&[], env(vars)), ["host=a", "host=b dbname=x"]);
        assert_eq!(database_urls(&["host=f".into()], env(vars)), ["host=f"]);
        assert!(database_urls(&[], env(&[("JOBQ_DASH_DATABASE_URL_2", "host=b")])).is_empty());
        let flags = Config::try_parse_from(["jobq-dash", "--database-url", "host=a", "--database-url", "host=b"]).unwrap();
        assert_eq!(flags.database_url, ["host=a", "host=b"]);
    }

    #[test]
    fn a_name_is_taken_out_of_the_connection_string() {
        let split = |s: &str| split_name(s).unwrap();
        assert_eq!(split("host=a dbname=app"), (None, "host=a dbname=app".into()));
        assert_eq!(split("host=a dash_name=eu dbname=app"), (Some("eu".into()), "host=a dbname=app".into()));
        assert_eq!(
            split("password='a b\\' dash_name' dash_name = 'eu-1'"),
            (Some("eu-1".into()), "password='a b\\' dash_name'".into())
        );
        assert_eq!(split("postgres://h/app?dash_name=eu"), (Some("eu".into()), "postgres://h/app".into()));
        assert_eq!(
            split("postgres://h/app?sslmode=disable&dash_name=eu&connect_timeout=3"),
            (Some("eu".into()), "postgres://h/app?sslmode=disable&connect_timeout=3".into())
        );
        assert_eq!(split("postgres://h/app"), (None, "postgres://h/app".into()));
        assert!(split_name("host=a dash_name=").is_err());
        assert!(split_name("postgres://h/app?dash_name=a/b").is_err());
    }

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
