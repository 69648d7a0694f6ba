//! The dashboard in-process on a free loopback port, and a client that drives it over HTTP as
//! a browser would (cookies and form posts by hand); what a scrape of /metrics holds.

use super::cluster;
use clap::Parser;
use jobq_dash::Config;
use reqwest::header::{AUTHORIZATION, COOKIE, LOCATION, SET_COOKIE};
use reqwest::StatusCode;

/// Starts the dashboard in-process with `args` (after the connection string), as `user`.
pub async fn start(db: &str, user: &str, args: &[&str]) -> Dash {
    start_urls(&[cluster().url(db, user)], args).await
}

/// Starts the dashboard in-process on a free loopback port, serving the databases of `urls`
/// (a `--database-url` each), with `args`.
pub async fn start_urls(urls: &[String], args: &[&str]) -> Dash {
    let mut all = vec!["jobq-dash"];
    for url in urls {
        all.extend(["--database-url", url.as_str()]);
    }
    all.extend_from_slice(args);
    let cfg = Config::try_parse_from(all).unwrap();
    let prefix = cfg.prefix();
    let router = jobq_dash::router(cfg).await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    Dash {
        base: format!("http://{addr}{prefix}"),
        http,
        auth: None,
    }
}

pub struct Dash {
    pub base: String,
    pub http: reqwest::Client,
    pub auth: Option<String>,
}

pub struct Page {
    pub status: StatusCode,
    pub body: String,
    /// The CSRF token the response set as a cookie, if it set one.
    pub token: Option<String>,
}

impl Dash {
    pub async fn get(&self, path: &str) -> Page {
        let mut req = self.http.get(format!("{}{path}", self.base));
        if let Some(a) = &self.auth {
            req = req.header(AUTHORIZATION, a);
        }
        let resp = req.send().await.unwrap();
        let token = resp
            .headers()
            .get_all(SET_COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .find_map(|v| v.strip_prefix("jobq_dash_csrf="))
            .map(|v| v.split(';').next().unwrap().to_string());
        let status = resp.status();
        Page {
            status,
            body: resp.text().await.unwrap(),
            token,
        }
    }

    /// A page that must answer 200.
    pub async fn ok(&self, path: &str) -> String {
        let p = self.get(path).await;
        assert_eq!(p.status, StatusCode::OK, "GET {path}: {}", p.body);
        p.body
    }

    /// A fresh CSRF token (cookie value = form value).
    pub async fn token(&self) -> String {
        self.get("/").await.token.expect("a CSRF cookie")
    }

    /// POSTs `form` with the cookie `cookie` (None: no cookie). Returns status and Location.
    pub async fn post(
        &self,
        path: &str,
        cookie: Option<&str>,
        form: &[(&str, &str)],
    ) -> (StatusCode, String, String) {
        let mut req = self.http.post(format!("{}{path}", self.base)).form(form);
        if let Some(c) = cookie {
            req = req.header(COOKIE, format!("jobq_dash_csrf={c}"));
        }
        let resp = req.send().await.unwrap();
        let loc = resp
            .headers()
            .get(LOCATION)
            .map(|v| v.to_str().unwrap().to_string())
            .unwrap_or_default();
        (resp.status(), loc, resp.text().await.unwrap())
    }
}

/// The value of the sample `series` (its name and labels exactly as written) in a scrape.
pub fn sample(metrics: &str, series: &str) -> Option<f64> {
    metrics.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// `promtool check metrics` on a scrape: its exit status and what it printed.
pub fn promtool_check(metrics: &str) -> (bool, String) {
    use std::io::Write;
    let mut p = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("promtool (Debian's prometheus package; scripts/setup.sh installs it)");
    p.stdin.take().unwrap().write_all(metrics.as_bytes()).unwrap();
    let out = p.wait_with_output().unwrap();
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}
