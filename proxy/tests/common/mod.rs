//! Three nodes and a proxy, as four real PostgreSQL clusters started by the extension's test
//! harness (tests/common, included below: initdb and pg_ctl as the OS user `postgres`, free
//! loopback ports, stopped and removed when the test process exits). jobq and jobq_proxy must
//! be installed already (scripts/test.sh: `cargo pgrx install`, scripts/install-proxy.sh).
//! Each test gets its own databases on every cluster: a node database per node (CREATE
//! EXTENSION jobq, jobq_set_node(k)) and a proxy database whose SQL/MED server `jobq` names
//! them, so tests of one binary run side by side.
#![allow(dead_code)]

#[path = "../../../tests/common/mod.rs"]
pub mod harness;

pub use harness::{sqlstate, wait_until, Cluster};
use postgres::Client;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

static COUNTER: AtomicUsize = AtomicUsize::new(0);

/// Login roles on every cluster: app and app2 (jobq_worker), admin (jobq_admin), nobody (no
/// grant). Roles are per cluster, so each cluster gets them, with the same names.
const ROLES: &str = "
    DO $$ BEGIN
        IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'app') THEN
            CREATE ROLE app LOGIN; CREATE ROLE app2 LOGIN; CREATE ROLE admin LOGIN; CREATE ROLE nobody LOGIN;
        END IF;
    END $$;";
const GRANTS: &str = "GRANT jobq_worker TO app, app2; GRANT jobq_admin TO admin;";

pub struct Clusters {
    pub nodes: Vec<Cluster>,
    pub proxy: Cluster,
}

/// The four clusters of this test binary: nodes reap every 200 ms and declare a worker dead
/// after 3 s without a heartbeat, so that a killed worker's jobs come back within seconds.
pub fn clusters() -> &'static Clusters {
    static C: OnceLock<Clusters> = OnceLock::new();
    C.get_or_init(|| {
        let conf = ["jobq.reap_interval = '200ms'", "jobq.heartbeat_timeout = '3s'"];
        let nodes: Vec<Cluster> = (0..3).map(|k| Cluster::start(&format!("node{k}"), &conf)).collect();
        let proxy = Cluster::start("proxy", &[]);
        for c in nodes.iter().chain(std::iter::once(&proxy)) {
            c.connect("postgres").batch_execute(ROLES).unwrap();
        }
        Clusters { nodes, proxy }
    })
}

/// One test's databases: `node_dbs[k]` on node k, `proxy_db` on the proxy.
pub struct Fleet {
    pub c: &'static Clusters,
    pub node_dbs: Vec<String>,
    pub proxy_db: String,
}

impl Fleet {
    pub fn new() -> Fleet {
        let c = clusters();
        let name = format!("p{}_{}", std::process::id(), COUNTER.fetch_add(1, Ordering::SeqCst));
        let mut node_dbs = Vec::new();
        for (k, node) in c.nodes.iter().enumerate() {
            let db = format!("{name}_n{k}");
            node.connect("postgres").batch_execute(&format!("CREATE DATABASE {db}")).unwrap();
            node.connect(&db)
                .batch_execute(&format!("CREATE EXTENSION jobq; SELECT jobq_set_node({k}); {GRANTS}"))
                .unwrap();
            node_dbs.push(db);
        }
        let proxy_db = format!("{name}_px");
        c.proxy.connect("postgres").batch_execute(&format!("CREATE DATABASE {proxy_db}")).unwrap();
        let parts: Vec<String> = node_dbs
            .iter()
            .enumerate()
            .map(|(k, db)| format!("p{k} 'host=127.0.0.1 port={} dbname={db} connect_timeout=5'", c.nodes[k].port))
            .collect();
        c.proxy
            .connect(&proxy_db)
            .batch_execute(&format!(
                "CREATE EXTENSION jobq_proxy CASCADE;
                 CREATE SERVER jobq FOREIGN DATA WRAPPER plproxy OPTIONS (modular_mapping '1', {});
                 CREATE USER MAPPING FOR PUBLIC SERVER jobq;
                 GRANT USAGE ON FOREIGN SERVER jobq TO jobq_reader;
                 {GRANTS}",
                parts.join(", ")
            ))
            .unwrap();
        Fleet { c, node_dbs, proxy_db }
    }

    /// A connection to the proxy database as `user`.
    pub fn proxy_as(&self, user: &str) -> Client {
        self.c.proxy.connect_as(&self.proxy_db, user)
    }

    /// A connection to node k's database, as the superuser.
    pub fn node(&self, k: usize) -> Client {
        self.c.nodes[k].connect(&self.node_dbs[k])
    }

    /// Pins `queue` to node k (jobq.placements), so that a test knows where each queue lives.
    pub fn place(&self, queue: &str, k: usize) {
        self.proxy_as("postgres")
            .execute("INSERT INTO jobq.placements (queue, node) VALUES ($1, $2)", &[&queue, &(k as i32)])
            .unwrap();
    }
}

/// A worker's heartbeat, as a real worker sends it: the nodes of this binary declare a worker
/// dead after 3 s without one, and a test loop on a busy machine can outlast that. `due` sends
/// `jobq_heartbeat` (through the proxy: to every node) when 500 ms have passed since the last.
pub struct Heartbeat {
    worker: uuid::Uuid,
    last: std::time::Instant,
}

impl Heartbeat {
    pub fn new(worker: uuid::Uuid) -> Heartbeat {
        Heartbeat { worker, last: std::time::Instant::now() }
    }

    pub fn due(&mut self, c: &mut Client) {
        if self.last.elapsed() >= std::time::Duration::from_millis(500) {
            c.query_one("SELECT jobq_heartbeat($1)", &[&self.worker]).unwrap();
            self.last = std::time::Instant::now();
        }
    }
}
