//! The crate's tests against a real jobq: run them with `scripts/test-clients.sh rust`, which
//! starts PostgreSQL 15 with jobq and a transaction-mode PgBouncer and sets JOBQ_TEST_DSN,
//! JOBQ_TEST_ADMIN_DSN and JOBQ_TEST_POOLER_DSN (jobq.heartbeat_timeout = 3s,
//! jobq.reap_interval = 200ms), and JOBQ_TEST_EDITION (`extension`, or `sql` for the SQL
//! edition). One test binary, so that it is linked once.

mod calls;
mod common;
mod errors;
mod processes;
mod testing;
mod worker;
