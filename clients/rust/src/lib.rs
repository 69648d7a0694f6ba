//! A client for jobq, the PostgreSQL job queue whose coordination logic lives in the database.
//!
//! Errors are [`Error`], whose variants name jobq's SQLSTATEs; a handler fails its job with a
//! [`JobError`].
#![warn(missing_docs)]

mod error;

pub use error::{Error, JobError};

/// Re-exported: the driver whose clients and transactions the calls take.
pub use tokio_postgres;
