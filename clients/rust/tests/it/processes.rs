//! Worker processes (examples/test_worker.rs, built by `cargo test` next to this binary):
//! exactly once under 8 of them, a SIGKILLed one's jobs run again elsewhere, SIGTERM drains.

use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use jobq_client::tokio_postgres::Client;
use jobq_client::*;
use serde_json::{json, Value};

use crate::common::*;

/// target/<profile>/examples/test_worker, beside target/<profile>/deps/ that holds this test.
fn test_worker_bin() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().and_then(|deps| deps.parent()).unwrap();
    let bin = profile_dir
        .join("examples")
        .join(format!("test_worker{}", std::env::consts::EXE_SUFFIX));
    assert!(
        bin.exists(),
        "{} is missing: `cargo test -p jobq-client` builds it (or `cargo build -p jobq-client --example test_worker`)",
        bin.display()
    );
    bin
}

/// Worker processes, killed if a test ends before they exit.
struct Workers(Vec<Child>);

impl Workers {
    fn spawn(&mut self, queue: &str, name: &str, env: &[(&str, &str)]) -> usize {
        let mut command = Command::new(test_worker_bin());
        command
            .env("JOBQ_DSN", dsn())
            .env("JOBQ_QUEUE", queue)
            .env("JOBQ_NAME", name)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        for (k, v) in env {
            command.env(k, v);
        }
        self.0.push(command.spawn().expect("start test_worker"));
        self.0.len() - 1
    }

    fn pid(&self, i: usize) -> i32 {
        self.0[i].id() as i32
    }

    fn signal(&self, i: usize, signal: i32) {
        // SAFETY: kill(2) on a child of this process that has not been waited for.
        assert_eq!(unsafe { libc::kill(self.pid(i), signal) }, 0);
    }

    async fn wait(&mut self, i: usize, timeout: Duration) -> ExitStatus {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.0[i].try_wait().unwrap() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "worker process {} did not exit within {timeout:?}",
                self.pid(i)
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        for child in &mut self.0 {
            if child.try_wait().ok().flatten().is_none() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

async fn scalar<T: for<'a> jobq_client::tokio_postgres::types::FromSql<'a>>(
    admin: &Client,
    sql: &str,
    params: &[&(dyn jobq_client::tokio_postgres::types::ToSql + Sync)],
) -> T {
    admin.query_one(sql, params).await.unwrap().get(0)
}

async fn runs_by(admin: &Client, ids: &[i64], pid: i32) -> i64 {
    scalar(
        admin,
        "SELECT count(*) FROM client_runs WHERE job_id = ANY($1) AND pid = $2",
        &[&ids, &pid],
    )
    .await
}

#[tokio::test]
async fn every_job_runs_exactly_once_under_8_worker_processes() {
    runs_table().await;
    let (app, admin) = (app().await, admin().await);
    let queue = unique("eight");
    let mut workers = Workers(Vec::new());
    for i in 0..8 {
        workers.spawn(
            &queue,
            &format!("{queue}-w{i}"),
            &[("JOBQ_CONCURRENCY", "4")],
        );
    }
    let pattern = format!("{queue}-w%");
    wait_for("8 registered workers", Duration::from_secs(20), || async {
        scalar::<i64>(
            &admin,
            "SELECT count(*) FROM jobq.workers WHERE name LIKE $1",
            &[&pattern],
        )
        .await
            == 8
    })
    .await;

    let payloads: Vec<Value> = (0..300).map(|n| json!({"n": n, "sleep_ms": 10})).collect();
    let ids = enqueue_batch(&app, &queue, &payloads, BatchOptions::new())
        .await
        .unwrap();
    wait_for("300 jobs completed", Duration::from_secs(60), || async {
        count_in_state(&admin, &ids, "completed").await == 300
    })
    .await;
    for i in 0..8 {
        workers.signal(i, libc::SIGTERM);
    }
    for i in 0..8 {
        assert!(
            workers.wait(i, Duration::from_secs(20)).await.success(),
            "worker {i} exits 0"
        );
    }

    let runs: (i64, i64) = {
        let row = admin
            .query_one(
                "SELECT count(*), count(DISTINCT job_id) FROM client_runs WHERE job_id = ANY($1)",
                &[&ids],
            )
            .await
            .unwrap();
        (row.get(0), row.get(1))
    };
    assert_eq!(runs, (300, 300), "every job ran once, none twice");
    let consistent: i64 = scalar(
        &admin,
        "SELECT count(*) FROM jobq.jobs j JOIN client_runs r ON r.job_id = j.id
          WHERE j.id = ANY($1) AND j.attempt = 1 AND (j.result->>'pid')::int = r.pid",
        &[&ids],
    )
    .await;
    assert_eq!(
        consistent, 300,
        "each result came from the process that ran the job, at its first attempt"
    );
    let processes: i64 = scalar(
        &admin,
        "SELECT count(DISTINCT pid) FROM client_runs WHERE job_id = ANY($1)",
        &[&ids],
    )
    .await;
    assert!(
        processes > 1,
        "the processes shared the work ({processes} ran jobs)"
    );
    let left: i64 = scalar(
        &admin,
        "SELECT count(*) FROM jobq.workers WHERE name LIKE $1",
        &[&pattern],
    )
    .await;
    assert_eq!(left, 0, "all unregistered");
}

#[tokio::test]
async fn a_sigkilled_workers_jobs_run_again_elsewhere() {
    runs_table().await;
    let (app, admin) = (app().await, admin().await);
    let queue = unique("sigkill");
    let mut workers = Workers(Vec::new());
    let a = workers.spawn(
        &queue,
        &format!("{queue}-a"),
        &[("JOBQ_BLOCK", "1"), ("JOBQ_CONCURRENCY", "2")],
    );
    let ids = enqueue_batch(
        &app,
        &queue,
        &[json!({"n": 1}), json!({"n": 2})],
        BatchOptions::new(),
    )
    .await
    .unwrap();
    let pid_a = workers.pid(a);
    wait_for(
        "both jobs running in worker A",
        Duration::from_secs(20),
        || async { runs_by(&admin, &ids, pid_a).await == 2 },
    )
    .await;

    workers.signal(a, libc::SIGKILL);
    assert!(!workers.wait(a, Duration::from_secs(10)).await.success());
    let b = workers.spawn(&queue, &format!("{queue}-b"), &[]);
    let pid_b = workers.pid(b);
    wait_for(
        "both jobs completed by worker B",
        Duration::from_secs(30),
        || async { count_in_state(&admin, &ids, "completed").await == 2 },
    )
    .await;
    let again: i64 = scalar(
        &admin,
        "SELECT count(*) FROM jobq.jobs WHERE id = ANY($1) AND (result->>'pid')::int = $2
            AND attempt = 2 AND interrupted_at IS NOT NULL",
        &[&ids, &pid_b],
    )
    .await;
    assert_eq!(
        again, 2,
        "B completed both, at their second attempt, after an interruption"
    );
    assert_eq!(runs_by(&admin, &ids, pid_b).await, 2);
    workers.signal(b, libc::SIGTERM);
    assert!(workers.wait(b, Duration::from_secs(20)).await.success());
}

#[tokio::test]
async fn sigterm_drains_the_jobs_in_flight_and_unregisters() {
    runs_table().await;
    let (app, admin) = (app().await, admin().await);
    let queue = unique("sigterm");
    let name = format!("{queue}-w");
    let mut workers = Workers(Vec::new());
    let w = workers.spawn(&queue, &name, &[("JOBQ_CONCURRENCY", "3")]);
    // Long enough that the test sees the three in flight and signals before any finishes,
    // on a slow machine too.
    let payloads: Vec<Value> = (0..4).map(|n| json!({"n": n, "sleep_ms": 5000})).collect();
    let ids = enqueue_batch(&app, &queue, &payloads, BatchOptions::new())
        .await
        .unwrap();
    let pid = workers.pid(w);
    wait_for("three jobs in flight", Duration::from_secs(20), || async {
        runs_by(&admin, &ids, pid).await == 3
    })
    .await;

    workers.signal(w, libc::SIGTERM);
    let status = workers.wait(w, Duration::from_secs(20)).await;
    assert_eq!(status.code(), Some(0), "exit code 0 after the drain");
    let completed: i64 = scalar(
        &admin,
        "SELECT count(*) FROM jobq.jobs WHERE id = ANY($1) AND state = 'completed' AND (result->>'pid')::int = $2",
        &[&ids, &pid],
    )
    .await;
    assert_eq!(
        completed, 3,
        "the jobs in flight finished and were reported"
    );
    assert_eq!(
        count_in_state(&admin, &ids, "ready").await,
        1,
        "no job taken after SIGTERM"
    );
    assert_eq!(
        scalar::<i32>(
            &admin,
            "SELECT max(attempt) FROM jobq.jobs WHERE id = ANY($1) AND state = 'ready'",
            &[&ids]
        )
        .await,
        0
    );
    let left: i64 = scalar(
        &admin,
        "SELECT count(*) FROM jobq.workers WHERE name = $1",
        &[&name],
    )
    .await;
    assert_eq!(left, 0, "unregistered");
}
