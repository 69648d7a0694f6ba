//! What every request is checked for before any handler reads it: no NUL character in the
//! path, the query string or a form body, once percent-decoded. PostgreSQL's text cannot hold
//! U+0000 (it refuses the value with SQLSTATE 22021), so such a value names no queue, kind, key
//! or job: it is refused here with the 400 page of any other bad input, for every route and
//! every parameter, instead of reaching a query.

use crate::db::AppError;
use axum::body::Body;
use axum::extract::Request;
use axum::http::header::CONTENT_TYPE;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// The largest form body read for the check (axum's own default limit for `Form`).
const FORM_LIMIT: usize = 2 * 1024 * 1024;

/// Whether `raw` (a path, a query string or an `application/x-www-form-urlencoded` body)
/// holds a NUL once percent-decoded: a NUL byte itself or its escape `%00` (axum decodes
/// each once: `%2500` is the text "%00", not a NUL).
pub fn holds_nul(raw: &[u8]) -> bool {
    raw.contains(&0) || raw.windows(3).any(|w| w == b"%00")
}

/// Middleware: a request whose path, query string or form body holds a NUL is a 400.
pub async fn refuse_nul(req: Request, next: Next) -> Response {
    let refuse = |part: &str| {
        AppError::BadRequest(format!(
            "the {part} holds a NUL character (%00), which no name or value in jobq can hold"
        ))
        .into_response()
    };
    let uri = req.uri();
    if holds_nul(uri.path().as_bytes()) {
        return refuse("URL's path");
    }
    if uri.query().is_some_and(|q| holds_nul(q.as_bytes())) {
        return refuse("URL's query string");
    }
    let form = req
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.to_ascii_lowercase()
                .starts_with("application/x-www-form-urlencoded")
        });
    if !form {
        return next.run(req).await;
    }
    // The body is read here and handed on as it was.
    let (parts, body) = req.into_parts();
    let bytes = match axum::body::to_bytes(body, FORM_LIMIT).await {
        Ok(b) => b,
        Err(e) => {
            return AppError::BadRequest(format!("cannot read the form: {e}")).into_response()
        }
    };
    if holds_nul(&bytes) {
        return refuse("form");
    }
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}

#[cfg(test)]
mod tests {
    use super::holds_nul;

    #[test]
    fn a_nul_once_decoded() {
        for raw in ["%00", "a%00b", "queue=%00&kind=x", "/queues/a%00", "x\0"] {
            assert!(holds_nul(raw.as_bytes()), "{raw:?}");
        }
        for raw in [
            "",
            "a",
            "%2500",
            "%0",
            "%10%01",
            "queue=mail&kind=%E2%82%AC",
            "/queues/a%20b",
        ] {
            assert!(!holds_nul(raw.as_bytes()), "{raw:?}");
        }
    }
}
