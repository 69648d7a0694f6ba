//! `jobq_proxy`, the proxy extension of jobq's scale-out (docs/scale-out.md): a control file
//! (`proxy/jobq_proxy.control`) and SQL (`proxy/sql/jobq_proxy--<version>.sql`), installed by
//! `scripts/install-proxy.sh`. No Rust runs in the proxy database: every function is PL/Proxy
//! or PL/pgSQL. This crate exists so that the extension and its integration tests
//! (`proxy/tests/`, three node clusters and a proxy cluster) are a member of the workspace.

/// The extension's install script, for tests and tools that want to read it.
pub const INSTALL_SQL: &str = include_str!("../sql/jobq_proxy--0.2.0.sql");
