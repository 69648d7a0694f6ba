//! Any client, any language: the example workers of examples/ (Python, Node, Rust and Ruby, each
//! a few lines over its language's jobq client library in clients/) as real processes against one
//! cluster with the background worker. scripts/setup.sh installs the libraries and the examples'
//! dependencies (Python's in the virtual environment .venv/, whose interpreter runs the Python
//! worker; Debian's Ruby and ruby-pg, with the gem's lib/ on the load path) and builds the Rust
//! one.
//!
//! What a worker did is read from the database (jobq.workers, jobq.jobs, pg_stat_activity,
//! pg_stat_user_functions) and from the lines its handler prints: "started" (id, attempt) when
//! it begins a job and "finished" (id) when it returns the job's result.
mod common;

use common::*;
use postgres::Client;
use serde_json::Value;
use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

const PATIENCE: Duration = Duration::from_secs(90);
const DB: &str = "xlang";

/// One cluster for this file, its background worker serving database `xlang` (in the SQL
/// edition, the workers' heartbeats run the passes). Heartbeats come every second: the
/// libraries heartbeat every third of the server's jobq.heartbeat_timeout.
fn cluster() -> &'static Cluster {
    static C: OnceLock<Cluster> = OnceLock::new();
    C.get_or_init(|| {
        let c = Cluster::start("xlang", &["jobq.database = 'xlang'", "jobq.reap_interval = '200ms'", "jobq.heartbeat_timeout = '3s'"]);
        c.create_jobq_db("xlang");
        // The workers and producers log in as an application role holding jobq_worker only.
        c.connect(DB).batch_execute(&format!("CREATE ROLE {APP} LOGIN; GRANT jobq_worker TO {APP};")).unwrap();
        c
    })
}

/// The login role of the example workers: granted jobq_worker, nothing else.
const APP: &str = "xlang_app";

fn dsn() -> String {
    format!("postgresql://{APP}@127.0.0.1:{}/{DB}", cluster().port)
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Lang {
    Python,
    Node,
    Rust,
    Ruby,
}

impl Lang {
    /// What the demo handler writes as its result's "lang".
    fn name(self) -> &'static str {
        match self {
            Lang::Python => "python",
            Lang::Node => "node",
            Lang::Rust => "rust",
            Lang::Ruby => "ruby",
        }
    }
}

fn command(lang: Lang, program: &str) -> Command {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut cmd = match lang {
        Lang::Python => {
            // The Python of the checkout's virtual environment (scripts/setup.sh makes .venv/,
            // with psycopg and clients/python in it), never the system's.
            let mut c = Command::new(root.join(".venv/bin/python"));
            c.arg(root.join(format!("examples/python/{program}.py")));
            c
        }
        Lang::Node => {
            let mut c = Command::new("node");
            c.arg(root.join(format!("examples/node/{program}.js")));
            c
        }
        Lang::Rust => {
            assert_eq!(program, "worker", "the Rust example is a worker only");
            Command::new(root.join("examples/rust/target/release/jobq-worker"))
        }
        Lang::Ruby => {
            assert_eq!(program, "worker", "the Ruby example is a worker only");
            let mut c = Command::new("ruby");
            c.arg("-I").arg(root.join("clients/ruby/lib")).arg(root.join("examples/ruby/worker.rb"));
            c
        }
    };
    cmd.env("JOBQ_DSN", dsn());
    cmd
}

/// A worker process, the name it registered under, and the JSON lines it printed so far.
struct Worker {
    lang: Lang,
    name: String,
    child: Child,
    events: Arc<Mutex<Vec<Value>>>,
    /// Reads the worker's stdout until EOF; joined before judging what it printed last.
    reader: Option<std::thread::JoinHandle<()>>,
    /// The superuser's connection string of the database the worker works in.
    admin: String,
}

impl Worker {
    /// A worker of `queue` in the test database, running up to five jobs at once.
    fn start(lang: Lang, queue: &str) -> Worker {
        Worker::start_env(lang, queue, dsn(), cluster().url(DB), &[])
    }

    /// A worker connecting to `dsn`, in the database `admin` (a superuser's connection
    /// string) reaches, with more environment (`JOBQ_POOLED`, `JOBQ_CONCURRENCY`, …).
    fn start_env(lang: Lang, queue: &str, dsn: String, admin: String, env: &[(&str, &str)]) -> Worker {
        static SEQ: AtomicUsize = AtomicUsize::new(0);
        let name = format!("x{}-{}-{queue}", lang.name(), SEQ.fetch_add(1, Ordering::Relaxed));
        let mut child = command(lang, "worker")
            .env("JOBQ_DSN", dsn)
            .env("JOBQ_NAME", &name)
            .env("JOBQ_QUEUES", queue)
            .env("JOBQ_CONCURRENCY", "5")
            .env("JOBQ_LOG_JSON", "1")
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("start the {lang:?} worker (did scripts/setup.sh run?): {e}"));
        let events = Arc::new(Mutex::new(Vec::new()));
        let sink = events.clone();
        let out = child.stdout.take().unwrap();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if let Ok(v) = serde_json::from_str::<Value>(&line) {
                    sink.lock().unwrap().push(v);
                }
            }
        });
        let w = Worker { lang, name, child, events, reader: Some(reader), admin };
        let mut c = w.db();
        wait_until(&format!("the {lang:?} worker to register"), PATIENCE, || w.registration(&mut c).is_some());
        w
    }

    fn db(&self) -> Client {
        Client::connect(&self.admin, postgres::NoTls).unwrap()
    }

    /// The worker's registration in jobq.workers, if it has one.
    fn registration(&self, c: &mut Client) -> Option<uuid::Uuid> {
        c.query_opt("SELECT id FROM jobq.workers WHERE name = $1", &[&self.name]).unwrap().map(|r| r.get(0))
    }

    /// The ids of the jobs the worker's handler printed `event` ("started", "finished") for.
    fn ids(&self, event: &str) -> Vec<i64> {
        self.events.lock().unwrap().iter().filter(|e| e["event"] == event).filter_map(|e| e["id"].as_i64()).collect()
    }

    fn saw(&self, event: &str, id: i64) -> bool {
        self.ids(event).contains(&id)
    }

    /// SIGTERM: it must finish its jobs, unregister and exit 0.
    fn stop(mut self) -> Worker {
        assert_eq!(unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) }, 0);
        let status = self.child.wait().unwrap();
        assert!(status.success(), "{:?} worker exit after SIGTERM: {status}", self.lang);
        // The process is gone, but its last lines may still be in the pipe: read to EOF first.
        self.reader.take().unwrap().join().unwrap();
        let mut c = self.db();
        assert_eq!(self.registration(&mut c), None, "{:?} worker unregistered", self.lang);
        self
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn enqueue(lang: Lang, queue: &str, count: usize, payload: &str) -> Vec<i64> {
    let out = command(lang, "enqueue").args([queue, &count.to_string(), payload]).output().unwrap();
    assert!(out.status.success(), "{lang:?} enqueue: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().lines().map(|l| l.parse().unwrap()).collect()
}

/// A job's state, attempt, whether an attempt of it was interrupted, and its result's worker
/// and lang.
fn job(c: &mut Client, id: i64) -> (String, i32, bool, Option<String>, Option<String>) {
    let r = c
        .query_one("SELECT state, attempt, interrupted_at IS NOT NULL, result->>'worker', result->>'lang' FROM jobq.jobs WHERE id = $1", &[&id])
        .unwrap();
    (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4))
}

fn completed(c: &mut Client, id: i64) -> bool {
    job(c, id).0 == "completed"
}

/// Jobs of `queues` by state, and which worker completed each.
fn outcome(c: &mut Client, queues: &[String]) -> (HashMap<String, i64>, HashMap<i64, String>) {
    let mut states = HashMap::new();
    for r in c.query("SELECT state, count(*) FROM jobq.jobs WHERE queue = ANY($1) GROUP BY 1", &[&queues]).unwrap() {
        states.insert(r.get(0), r.get(1));
    }
    let by = c
        .query("SELECT id, result->>'worker' FROM jobq.jobs WHERE queue = ANY($1) AND state = 'completed'", &[&queues])
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get::<_, Option<String>>(1).unwrap_or_default()))
        .collect();
    (states, by)
}

/// Every id of `expected` once, and nothing else, in `logged` (any order); what differs.
fn each_once(logged: Vec<i64>, expected: &[i64]) -> Result<(), String> {
    let mut counts: HashMap<i64, usize> = expected.iter().map(|id| (*id, 0)).collect();
    let mut unknown = Vec::new();
    for id in logged {
        match counts.get_mut(&id) {
            Some(n) => *n += 1,
            None => unknown.push(id),
        }
    }
    let mut wrong: Vec<(i64, usize)> = counts.into_iter().filter(|(_, n)| *n != 1).collect();
    wrong.sort();
    match (wrong.is_empty(), unknown.is_empty()) {
        (true, true) => Ok(()),
        _ => Err(format!("(id, times) not once: {wrong:?}; not expected: {unknown:?}")),
    }
}

/// Enqueue from one language, work with two others at once; every job run and completed
/// exactly once.
fn exactly_once_across(queue: &str, producer: Lang, workers: [Lang; 2]) {
    const N: usize = 200;
    const OWN: usize = 3;
    let mut c = cluster().connect(DB);
    // Each worker also serves a queue of its own: how the shared queue splits between the two
    // is timing, the jobs of a worker's own queue are certainly its.
    let own = workers.map(|w| format!("{queue}-{}", w.name()));
    let a = Worker::start(workers[0], &format!("{queue},{}", own[0]));
    let b = Worker::start(workers[1], &format!("{queue},{}", own[1]));
    let mut ids = enqueue(producer, queue, N, r#"{"sleep_ms": 10}"#);
    assert_eq!(ids.len(), N);
    let own_ids = own.clone().map(|q| enqueue(producer, &q, OWN, r#"{"sleep_ms": 10}"#));
    ids.extend(own_ids.iter().flatten());
    let queues = [queue.to_string(), own[0].clone(), own[1].clone()];
    let total = (N + 2 * OWN) as i64;
    wait_until("every job to complete", PATIENCE, || outcome(&mut c, &queues).0.get("completed") == Some(&total));
    let (a, b) = (a.stop(), b.stop());

    let (states, by) = outcome(&mut c, &queues);
    assert_eq!(states, HashMap::from([("completed".to_string(), total)]));
    // Each job ran once: in the database, and in the workers' own logs.
    for event in ["started", "finished"] {
        let logged: Vec<i64> = a.ids(event).into_iter().chain(b.ids(event)).collect();
        each_once(logged, &ids).unwrap_or_else(|e| panic!("every job {event} by exactly one worker, once: {e}"));
    }
    for (w, own_ids) in [&a, &b].into_iter().zip(&own_ids) {
        let mine: Vec<i64> = w.ids("finished");
        assert!(own_ids.iter().all(|id| mine.contains(id)), "the {:?} worker completed its own queue's jobs", w.lang);
        assert!(mine.iter().all(|id| by[id] == w.name), "the result names the worker that completed the job");
    }
}

#[test]
fn python_enqueues_node_and_rust_work() {
    exactly_once_across("py-to-node-rust", Lang::Python, [Lang::Node, Lang::Rust]);
}

#[test]
fn node_enqueues_python_and_rust_work() {
    exactly_once_across("node-to-py-rust", Lang::Node, [Lang::Python, Lang::Rust]);
}

#[test]
fn python_enqueues_ruby_and_node_work() {
    exactly_once_across("py-to-rb-node", Lang::Python, [Lang::Ruby, Lang::Node]);
}

/// Each example worker, idle, waits inside the server (jobq_checkout with wait) instead of
/// LISTEN or polling, takes a job the moment it is committed, and a SIGTERM cancels the wait
/// rather than sitting it out: the wait is five minutes, and the worker must exit well within
/// PATIENCE.
#[test]
fn every_example_worker_waits_inside_the_server_when_idle() {
    const WAIT_S: u64 = 300; // more than three times PATIENCE
    for (lang, queue) in [(Lang::Python, "wait-py"), (Lang::Node, "wait-node"), (Lang::Rust, "wait-rust"), (Lang::Ruby, "wait-ruby")] {
        let mut c = cluster().connect(DB);
        let w = Worker::start_env(lang, queue, dsn(), cluster().url(DB), &[("JOBQ_WAIT_S", &WAIT_S.to_string())]);
        let name = w.name.clone();
        // The libraries name their connections after the worker (<name> or <name>-<role>).
        let waiting = |c: &mut Client| -> bool {
            c.query_one(
                "SELECT count(*) = 1 FROM pg_stat_activity
                  WHERE (application_name = $1 OR application_name LIKE $1 || '-%') AND wait_event IN ('Extension', 'PgSleep', 'advisory') AND query LIKE '%jobq_checkout%wait%'",
                &[&name],
            )
            .unwrap()
            .get(0)
        };
        wait_until(&format!("the idle {lang:?} worker to wait inside the server"), PATIENCE, || waiting(&mut c));
        let job: i64 = c.query_one("SELECT jobq_enqueue($1)", &[&queue]).unwrap().get(0);
        wait_until("the worker to complete the job", PATIENCE, || completed(&mut c, job));
        assert_eq!(job_of(&mut c, job), Some(name.clone()), "{lang:?}: the waiting worker took it");
        wait_until("the worker to wait again", PATIENCE, || waiting(&mut c));
        let stopping = std::time::Instant::now();
        w.stop();
        assert!(stopping.elapsed() < PATIENCE, "{lang:?}: SIGTERM cancelled the {WAIT_S} s wait ({:?})", stopping.elapsed());
    }
}

/// The worker named in a completed job's result.
fn job_of(c: &mut Client, id: i64) -> Option<String> {
    job(c, id).3
}

/// SIGKILL a worker mid-job: the background worker reaps it (its session is gone) and another
/// worker, in another language, completes the job.
#[test]
fn a_job_of_a_killed_worker_is_completed_by_another() {
    for (victim, rescuer, queue) in [
        (Lang::Python, Lang::Rust, "kill-py"),
        (Lang::Node, Lang::Ruby, "kill-node"),
        (Lang::Rust, Lang::Node, "kill-rust"),
        (Lang::Ruby, Lang::Python, "kill-ruby"),
    ] {
        let mut c = cluster().connect(DB);
        let mut v = Worker::start(victim, queue);
        // A job of a minute, so that the victim is mid-job when it dies however slow the
        // machine: it is killed once it has started the job.
        let job_id: i64 = c.query_one("SELECT jobq_enqueue($1, '{\"sleep_ms\": 60000}')", &[&queue]).unwrap().get(0);
        wait_until("the victim to start the job", PATIENCE, || v.saw("started", job_id));
        assert_eq!(unsafe { libc::kill(v.child.id() as i32, libc::SIGKILL) }, 0);
        v.child.wait().unwrap();
        // The second attempt needs no minute: the payload it will be handed is made empty
        // (the test's superuser writes the row), before any rescuer runs.
        assert_eq!(c.execute("UPDATE jobq.live_jobs SET payload = '{}' WHERE id = $1", &[&job_id]).unwrap(), 1);
        let r = Worker::start(rescuer, queue);

        wait_until("another worker to complete the job", PATIENCE, || completed(&mut c, job_id));
        assert_eq!(
            job(&mut c, job_id),
            ("completed".to_string(), 2, true, Some(r.name.clone()), Some(rescuer.name().to_string())),
            "{victim:?} killed, {rescuer:?} completed the second attempt"
        );
        // Stopped first: the rescuer's last lines may still be in the pipe until then.
        let r = r.stop();
        assert!(r.saw("finished", job_id) && !v.saw("finished", job_id));
    }
}

/// Each example worker sends the jobs it holds with every heartbeat (`holding`): a job
/// claimed under its id behind its back (as a checkout whose reply never reached it would
/// be) goes back to the queue at its next heartbeat, while the job it is really running,
/// several heartbeats long, stays its own. One job at a time: the libraries send no list
/// while a checkout of theirs is under way (its jobs may be claimed and not in hand yet),
/// and a worker with a free slot waits in a checkout.
#[test]
fn every_example_worker_heartbeats_with_what_it_holds() {
    for (lang, queue) in [(Lang::Python, "hold-py"), (Lang::Node, "hold-node"), (Lang::Rust, "hold-rust"), (Lang::Ruby, "hold-ruby")] {
        let mut c = cluster().connect(DB);
        let w = Worker::start_env(lang, queue, dsn(), cluster().url(DB), &[("JOBQ_CONCURRENCY", "1")]);
        let wid = w.registration(&mut c).unwrap();
        // A job of a minute, many heartbeats long: it is still running at every check below,
        // however slow the machine, and cancelled at the end.
        let long: i64 = c.query_one("SELECT jobq_enqueue($1, '{\"sleep_ms\": 60000}')", &[&queue]).unwrap().get(0);
        wait_until("the worker to start the long job", PATIENCE, || w.saw("started", long));
        // The superuser may act for any worker: it checks out a job of another queue under
        // this worker's id, a claim whose reply the worker never sees.
        let elsewhere = format!("{queue}-elsewhere");
        let lost: i64 = c.query_one("SELECT jobq_enqueue($1)", &[&elsewhere]).unwrap().get(0);
        let got: i64 = c.query_one("SELECT id FROM jobq_checkout($1, ARRAY[$2])", &[&wid, &elsewhere]).unwrap().get(0);
        assert_eq!(got, lost);
        wait_until("the worker's heartbeat to put the unknown job back", PATIENCE, || {
            c.query_one("SELECT state = 'ready' AND interrupted_at IS NOT NULL FROM jobq.jobs WHERE id = $1", &[&lost])
                .unwrap()
                .get::<_, bool>(0)
        });
        // Two heartbeats more, then the job in hand is still the worker's first attempt, never
        // cut off.
        let beat = |c: &mut Client| -> std::time::SystemTime {
            c.query_one("SELECT heartbeat_at FROM jobq.workers WHERE id = $1", &[&wid]).unwrap().get(0)
        };
        for _ in 0..2 {
            let last = beat(&mut c);
            wait_until("the worker's next heartbeat", PATIENCE, || beat(&mut c) > last);
        }
        let in_hand = "SELECT state, attempt, interrupted_at IS NOT NULL, worker_id FROM jobq.jobs WHERE id = $1";
        let r = c.query_one(in_hand, &[&long]).unwrap();
        assert_eq!(
            (r.get::<_, String>(0), r.get::<_, i32>(1), r.get::<_, bool>(2), r.get::<_, uuid::Uuid>(3)),
            ("executing".to_string(), 1, false, wid),
            "{lang:?}: the job in hand was never put back"
        );
        // Cancelled: the worker sees the request at a heartbeat and ends the job's sleep.
        assert_eq!(c.query_one("SELECT jobq_cancel($1)", &[&long]).unwrap().get::<_, String>(0), "executing");
        wait_until("the long job to be cancelled", PATIENCE, || job(&mut c, long).0 == "cancelled");
        let r = c.query_one(in_hand, &[&long]).unwrap();
        assert_eq!((r.get::<_, i32>(1), r.get::<_, bool>(2)), (1, false), "{lang:?}: cancelled in its first attempt");
        w.stop();
    }
}

/// The libraries' one-commit protocol: a job's success is reported by the call that checks
/// out the worker's next job (jobq_complete_and_checkout). Seven jobs waiting, one at a time:
/// the first comes from a checkout, each of the seven completions rides on the checkout after
/// it. The calls the workers made are counted with track_functions ('all': in the extension
/// both fused calls are C functions, src/complete.rs, which call jobq_complete without the
/// function manager, so it is not counted there) in a database of this test's own (function
/// statistics are per database), so other tests' calls do not mix in; and the statements the
/// workers sent there are logged (log_statement), so that a completion sent on its own would
/// show.
#[test]
fn every_example_worker_completes_through_the_fused_call() {
    let db = "xfused";
    cluster().connect("postgres").batch_execute(&format!("CREATE DATABASE {db}")).unwrap();
    let mut c = cluster().connect(db);
    c.batch_execute(&format!(
        "SET client_min_messages = error; CREATE EXTENSION jobq; GRANT jobq_worker TO {APP};
         ALTER DATABASE {db} SET track_functions = 'all'; ALTER DATABASE {db} SET log_statement = 'all';"
    ))
    .unwrap();
    let calls = |c: &mut postgres::Client| -> [i64; 4] {
        c.batch_execute("SELECT pg_stat_clear_snapshot()").unwrap();
        let row = c
            .query_one(
                "SELECT coalesce(sum(calls) FILTER (WHERE funcname = 'jobq_complete_and_checkout'), 0)::bigint,
                        coalesce(sum(calls) FILTER (WHERE funcname = 'jobq_fail_and_checkout'), 0)::bigint,
                        coalesce(sum(calls) FILTER (WHERE funcname = 'jobq_complete_many'), 0)::bigint,
                        coalesce(sum(calls) FILTER (WHERE funcname = 'jobq_fail'), 0)::bigint
                   FROM pg_stat_user_functions",
                &[],
            )
            .unwrap();
        [0, 1, 2, 3].map(|i| row.get::<_, i64>(i))
    };
    for (lang, queue) in [(Lang::Python, "fused-py"), (Lang::Node, "fused-node"), (Lang::Rust, "fused-rust"), (Lang::Ruby, "fused-ruby")] {
        let before = calls(&mut c);
        let logged = cluster().log().len();
        let ids: Vec<i64> = c.query("SELECT jobq_enqueue($1) FROM generate_series(1, 7)", &[&queue]).unwrap().iter().map(|r| r.get(0)).collect();
        let url = format!("postgresql://{APP}@127.0.0.1:{}/{db}", cluster().port);
        let w = Worker::start_env(lang, queue, url, cluster().url(db), &[("JOBQ_CONCURRENCY", "1")]);
        wait_until("the worker to complete the jobs", PATIENCE, || ids.iter().all(|id| completed(&mut c, *id)));
        let name = w.name.clone();
        // Stopped first: its last lines may still be in the pipe until then.
        let w = w.stop();
        each_once(w.ids("finished"), &ids).unwrap_or_else(|e| panic!("{lang:?}: {e}"));
        // Its sessions ended: their function counts are flushed.
        wait_until("the worker's sessions to end", PATIENCE, || {
            c.query_one("SELECT count(*) = 0 FROM pg_stat_activity WHERE (application_name = $1 OR application_name LIKE $1 || '-%')", &[&name]).unwrap().get::<_, bool>(0)
        });
        // A backend flushes its function counts as it exits: await its fused calls (one a job,
        // but the Ruby worker's, below).
        let want = if lang == Lang::Ruby { 1 } else { 7 };
        wait_until("the worker's function counts", PATIENCE, || calls(&mut c)[0] - before[0] >= want);
        let after = calls(&mut c);
        let [fused, fail_fused, many, fail] = [0, 1, 2, 3].map(|i| after[i] - before[i]);
        // No worker sent a completion of its own: no statement logged in this database (the
        // only one that logs them) calls jobq_complete.
        let log = cluster().log();
        let statements = log[logged..].lines().filter(|l| l.contains("LOG:  statement: ") || l.contains("LOG:  execute ")).collect::<Vec<_>>();
        assert!(statements.iter().any(|l| l.contains("jobq_complete_and_checkout(")), "{lang:?}: the worker's fused calls are logged");
        let sent = statements.iter().filter(|l| l.contains("jobq_complete(")).collect::<Vec<_>>();
        assert!(sent.is_empty(), "{lang:?}: completions sent on their own: {sent:?}");
        // One job at a time, so a fused call completes one job at most: seven of them, each
        // by jobq_complete alone (one job in hand). jobq_complete_many runs only for a fused
        // call with nothing in hand: the first, in a library whose worker starts with one.
        // The Ruby worker holds up to twice its concurrency in hand while its jobs are short
        // (clients/ruby/lib/jobq/worker.rb, capacity). It then checks out with nothing to
        // report, and a job that finishes during that checkout is reported on its report
        // connection (jobq_complete_many alone) or with another in hand: how many do depends
        // on timing. Of the Ruby worker this asserts what holds every time: at least one
        // completion rode on a checkout, none failed.
        if lang == Lang::Ruby {
            assert!(fused >= 1 && many <= 7 && (fail_fused, fail) == (0, 0), "{lang:?}: completions rode on checkouts or the report connection: {fused} fused, {many} batch, {fail_fused}/{fail} failures");
        } else {
            assert!(fused >= 7 && many <= 1 && (fail_fused, fail) == (0, 0), "{lang:?}: every completion rode on a checkout: {fused} fused, {many} batch, {fail_fused}/{fail} failures");
        }
    }
}

/// The contract, Poolers: the example workers behind PgBouncer in transaction mode (waiting inside the
/// server instead of LISTEN, no bind_to_session, heartbeats with `holding`), more client connections than
/// server sessions so that consecutive calls of one worker run in different sessions: every
/// job completed exactly once, a worker killed mid-job has its job completed by another
/// once its heartbeats stop (the background worker reaps it after jobq.heartbeat_timeout), and
/// a checkout with `wait` waits inside the server through the pooler.
#[test]
fn the_example_workers_work_through_pgbouncer_in_transaction_mode() {
    const N: usize = 300;
    let cluster = Cluster::start("pooled", &["jobq.reap_interval = '200ms'", "jobq.heartbeat_timeout = '3s'"]);
    let db = "pooled";
    let app = "pooled_app";
    cluster.create_jobq_db(db);
    let mut c = cluster.connect(db);
    c.batch_execute(&format!("CREATE ROLE {app} LOGIN; GRANT jobq_worker TO {app};")).unwrap();
    // Five server sessions: a waiting checkout holds one while it waits (four workers), the
    // heartbeats and the reports of results share the fifth.
    let bouncer = Bouncer::start(&cluster, db, app, 5);
    let dsn = format!("postgresql://{app}@127.0.0.1:{}/{db}", bouncer.port);
    let pooled = [("JOBQ_POOLED", "1")];
    // Each worker also serves a queue of its own: how "pq" splits between them is timing, the
    // jobs of a worker's own queue are certainly its.
    let langs = [Lang::Python, Lang::Node, Lang::Rust, Lang::Ruby];
    let own: Vec<String> = langs.iter().map(|lang| format!("pq-{}", lang.name())).collect();
    let workers: Vec<Worker> = langs
        .iter()
        .zip(&own)
        .map(|(lang, q)| Worker::start_env(*lang, &format!("pq,{q}"), dsn.clone(), cluster.url(db), &pooled))
        .collect();
    let registered: Vec<(Option<i32>, bool)> = c
        .query("SELECT backend_pid, owner::text = $1 FROM jobq.workers", &[&app])
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(registered, vec![(None, true); 4], "registered without bind_to_session, owned by the app's role");
    let enqueue_sql = |c: &mut Client, queue: &str, count: usize| -> Vec<i64> {
        c.query("SELECT jobq_enqueue($1, '{\"sleep_ms\": 5}') FROM generate_series(1, $2::int)", &[&queue, &(count as i32)])
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect()
    };
    let mut ids = enqueue_sql(&mut c, "pq", N);
    let own_ids: Vec<Vec<i64>> = own.iter().map(|q| enqueue_sql(&mut c, q, 3)).collect();
    ids.extend(own_ids.iter().flatten());
    let queues: Vec<String> = std::iter::once("pq".to_string()).chain(own.iter().cloned()).collect();
    wait_until("every job to complete", PATIENCE, || outcome(&mut c, &queues).0.get("completed") == Some(&(ids.len() as i64)));
    // Twelve client connections (a job, a report and a heartbeat one per worker) shared five
    // server sessions: the workers' calls moved between sessions.
    let sessions: i64 = c.query_one("SELECT count(*) FROM pg_stat_activity WHERE usename = $1", &[&app]).unwrap().get(0);
    assert!((1..=5).contains(&sessions), "{sessions} server sessions for the pooled workers");
    let workers: Vec<Worker> = workers.into_iter().map(Worker::stop).collect();
    for event in ["started", "finished"] {
        let logged: Vec<i64> = workers.iter().flat_map(|w| w.ids(event)).collect();
        each_once(logged, &ids).unwrap_or_else(|e| panic!("every job {event} by exactly one worker, once: {e}"));
    }
    for (w, own_ids) in workers.iter().zip(&own_ids) {
        let mine = w.ids("finished");
        assert!(own_ids.iter().all(|id| mine.contains(id)), "the {:?} worker completed its own queue's jobs", w.lang);
    }

    // Crash recovery without a bound session: the heartbeats stop, the background worker
    // reaps the worker after jobq.heartbeat_timeout, another worker completes the job.
    let mut victim = Worker::start_env(Lang::Python, "pkill", dsn.clone(), cluster.url(db), &pooled);
    let job: i64 = c.query_one("SELECT jobq_enqueue('pkill', '{\"sleep_ms\": 60000}')", &[]).unwrap().get(0);
    wait_until("the victim to start the job", PATIENCE, || victim.saw("started", job));
    let rescuer = Worker::start_env(Lang::Node, "pkill", dsn.clone(), cluster.url(db), &pooled);
    assert_eq!(unsafe { libc::kill(victim.child.id() as i32, libc::SIGKILL) }, 0);
    victim.child.wait().unwrap();
    // The rescuer gets the job once it is requeued; it sleeps 60 s, so cut it short: wait for
    // the claim of the second attempt, which only the reaping makes possible.
    wait_until("the rescuer to start the requeued job", PATIENCE, || rescuer.saw("started", job));
    let row = c.query_one("SELECT state, attempt, interrupted_at IS NOT NULL FROM jobq.jobs WHERE id = $1", &[&job]).unwrap();
    assert_eq!(
        (row.get::<_, String>(0), row.get::<_, i32>(1), row.get::<_, bool>(2)),
        ("executing".to_string(), 2, true),
        "the killed worker's attempt was cut off and the job runs again elsewhere"
    );
    drop(rescuer);

    // A checkout that waits inside the server works through the pooler too (it needs no
    // session state): woken by the commit of a job for it. Simple-query protocol, literal
    // arguments: no statement outlives its transaction.
    let url = format!("host=127.0.0.1 port={} user={app} dbname={db}", bouncer.port);
    let waiting = std::thread::spawn(move || {
        let mut p = Client::connect(&url, postgres::NoTls).unwrap();
        let first = |rows: Vec<postgres::SimpleQueryMessage>| -> Option<String> {
            rows.into_iter().find_map(|m| match m {
                postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_string),
                _ => None,
            })
        };
        let w = first(p.simple_query("SELECT jobq_register_worker()").unwrap()).unwrap();
        let began = std::time::Instant::now();
        let got = first(p.simple_query(&format!("SELECT id FROM jobq_checkout('{w}', ARRAY['pwait'], 1, '20 s')")).unwrap());
        (got, began.elapsed())
    });
    // This call's own session, by its query (the killed workers' sessions may still be ending
    // their waits on other queues).
    wait_until("the pooled checkout to wait", PATIENCE, || {
        c.query_one(
            "SELECT count(*) = 1 FROM pg_stat_activity
              WHERE usename = $1 AND query LIKE '%pwait%' AND wait_event IN ('Extension', 'PgSleep', 'advisory')",
            &[&app],
        )
        .unwrap()
        .get(0)
    });
    let job: i64 = c.query_one("SELECT jobq_enqueue('pwait')", &[]).unwrap().get(0);
    let (got, took) = waiting.join().unwrap();
    if got != Some(job.to_string()) {
        // What the server knew, for a failure that must be explained (the floor: the extension's).
        let seen: Vec<String> = [
            format!(
                "SELECT format('job %s %s worker %s, %s ready row', j.id, j.state, j.worker_id,
                               (SELECT count(*) FROM jobq.ready r WHERE r.id = j.id)) FROM jobq.jobs j WHERE j.id = {job}"
            ),
            "SELECT format('floor %s', f) FROM jobq._floor('jobq.ready'::regclass, 'pwait') f".to_string(),
            "SELECT format('waiting workers %s', jobq._waiting_workers())".to_string(),
            format!("SELECT format('session %s %s %s: %s', pid, state, wait_event, query) FROM pg_stat_activity WHERE usename = '{app}'"),
        ]
        .iter()
        .flat_map(|q| match c.query(q.as_str(), &[]) {
            Ok(rows) => rows.iter().map(|r| r.get(0)).collect(),
            Err(e) => vec![format!("({e})")],
        })
        .collect();
        panic!("the pooled checkout returned {got:?} after {took:?}, not job {job}:\n{}", seen.join("\n"));
    }
    drop(bouncer);
}
