//! jobq-dash started (the binary itself) with connection strings a real server refuses: it
//! exits saying what psql would say (the server's own message, or the server it could not
//! reach), never the client library's summary; and it reads several databases from the
//! environment.

mod common;

use clap::Parser;
use common::cluster;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// jobq-dash with `args` and `env` (and no other JOBQ_DASH_ variable), on a free port.
fn command(args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_jobq-dash"));
    cmd.args(args).args(["--listen", "127.0.0.1:0"]);
    for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("JOBQ_DASH_")) {
        cmd.env_remove(k);
    }
    cmd.envs(env.iter().copied());
    cmd
}

/// Kills the child when dropped (a test that fails leaves no server behind).
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// What jobq-dash with `args` printed when it refused to start (it must exit, with status 2,
/// within a minute).
fn refused(args: &[&str], env: &[(&str, &str)]) -> String {
    let mut child = Running(command(args, env).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap());
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.0.try_wait().unwrap() {
            break status;
        }
        assert!(start.elapsed() < Duration::from_secs(60), "jobq-dash {args:?} did not exit: it started");
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(child.0.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert_eq!(status.code(), Some(2), "{args:?}: {err}");
    err
}

fn closed_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

#[tokio::test]
async fn a_bad_connection_string_is_refused_in_the_servers_words() {
    let c = cluster();
    let db = c.fresh_db().await;
    c.password_role("dash_pw", "right").await;
    let bare = format!("bare_{}", std::process::id());
    c.connect("postgres", "postgres").await.batch_execute(&format!("CREATE DATABASE {bare}")).await.unwrap();
    let closed = closed_port();
    let at = format!("cannot use the database: connection to server at \"127.0.0.1\", port {} failed: ", c.port);
    let refused_at = format!("connection to server at \"127.0.0.1\", port {closed} failed: Connection refused");
    let cases: Vec<(String, String)> = vec![
        (format!("{} password=wrong", c.url(&db, "dash_pw")), format!("{at}FATAL:  password authentication failed for user \"dash_pw\"")),
        (c.url(&db, "dash_pw"), format!("{at}the server asks for a password and the connection string gives none")),
        (c.url("nosuch", "dash_reader"), format!("{at}FATAL:  database \"nosuch\" does not exist")),
        (c.url(&db, "nobody"), format!("{at}FATAL:  role \"nobody\" does not exist")),
        (format!("host=127.0.0.1 port={closed} user=dash_reader dbname={db}"), refused_at.clone()),
        (format!("postgres://dash_reader@127.0.0.1:{closed}/{db}"), refused_at),
        (format!("host=127.0.0.1 prot={}", c.port), "invalid connection string: unknown option `prot`".into()),
        ("postgres://127.0.0.1:notaport/app".into(), "invalid connection string: invalid value for option `port`".into()),
        ("user=dash_reader dbname=app".into(), "no host in the connection string".into()),
        (c.url(&bare, "dash_reader"), format!("jobq is not installed in database \"{bare}\" (at \"127.0.0.1\", port {})", c.port)),
        (format!("{} dash_name=a/b", c.url(&db, "dash_reader")), "dash_name=\"a/b\": a name is letters".into()),
    ];
    for (url, said) in &cases {
        let err = refused(&["--database-url", url], &[]);
        assert!(err.starts_with("jobq-dash: ") && err.contains(said.as_str()), "{url}:\n{err}\nwanted: {said}");
        for summary in ["db error", "Unavailable", "invalid configuration", "password=wrong"] {
            assert!(!err.contains(summary), "{url}: {err}");
        }
    }
    // Of several connection strings, which one.
    let err = refused(&["--database-url", &c.url(&db, "dash_reader"), "--database-url", &c.url("nosuch", "dash_reader")], &[]);
    assert!(err.contains("(--database-url 2)") && err.contains("database \"nosuch\" does not exist"), "{err}");
    // The right password is let in (what was refused was the password).
    let right = format!("{} password=right", c.url(&db, "dash_pw"));
    let cfg = jobq_dash::Config::try_parse_from(["jobq-dash", "--database-url", &right]).unwrap();
    assert!(jobq_dash::router(cfg).await.is_ok());
}

/// JOBQ_DASH_DATABASE_URL, JOBQ_DASH_DATABASE_URL_2: two databases, the second named by its
/// dash_name; /metrics reads both.
#[tokio::test]
async fn the_environment_names_several_databases() {
    let c = cluster();
    let (a, b) = (c.fresh_db().await, c.fresh_db().await);
    let second = format!("{} dash_name=second", c.url(&b, "dash_reader"));
    let mut child = Running(
        command(&[], &[("JOBQ_DASH_DATABASE_URL", &c.url(&a, "dash_reader")), ("JOBQ_DASH_DATABASE_URL_2", &second)])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut said = Vec::new();
    let mut lines = BufReader::new(child.0.stderr.take().unwrap()).lines();
    let base = loop {
        let line = lines.next().unwrap_or_else(|| panic!("jobq-dash exited: {said:?}")).unwrap();
        if let Some(url) = line.strip_prefix("jobq-dash: serving ") {
            break url.trim_end_matches('/').to_string();
        }
        said.push(line);
    };
    let m = reqwest::get(format!("{base}/metrics")).await.unwrap().text().await.unwrap();
    for db in [a.as_str(), "second"] {
        assert!(m.contains(&format!("jobq_database_up{{database=\"{db}\"}} 1")), "{db}:\n{m}");
    }
}
