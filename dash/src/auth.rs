//! Who may use the dashboard (HTTP basic auth) and proof that an action came from one of its
//! own pages (CSRF tokens).
//!
//! CSRF: a signed double-submit cookie. Every response to a request without a valid token
//! sets the cookie `jobq_dash_csrf` = `nonce.hmac(secret, nonce)` (a random secret per
//! process), and every form of an action carries the same value in the field `csrf`. An
//! action is accepted only when the field equals the cookie and the signature is valid: a
//! page of another site can make the browser send the cookie, but can neither read it nor
//! make up a value this process signed.

use crate::db::AppError;
use crate::App;
use axum::extract::{Request, State};
use axum::http::header::{AUTHORIZATION, COOKIE, SET_COOKIE, WWW_AUTHENTICATE};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::sync::Arc;

pub const CSRF_COOKIE: &str = "jobq_dash_csrf";
pub const CSRF_FIELD: &str = "csrf";

/// The token of the current request, for the forms a page renders.
#[derive(Clone, Debug)]
pub struct CsrfToken(pub String);

pub struct Csrf {
    secret: [u8; 32],
}

impl Default for Csrf {
    fn default() -> Self {
        Self::new()
    }
}

impl Csrf {
    pub fn new() -> Csrf {
        let mut secret = [0u8; 32];
        getrandom::fill(&mut secret).expect("random secret");
        Csrf { secret }
    }

    fn mac(&self, nonce: &str) -> Hmac<Sha256> {
        let mut m = Hmac::<Sha256>::new_from_slice(&self.secret).expect("any key length");
        m.update(nonce.as_bytes());
        m
    }

    pub fn issue(&self) -> String {
        let mut nonce = [0u8; 16];
        getrandom::fill(&mut nonce).expect("random nonce");
        let nonce = hex(&nonce);
        let sig = hex(&self.mac(&nonce).finalize().into_bytes());
        format!("{nonce}.{sig}")
    }

    pub fn valid(&self, token: &str) -> bool {
        let Some((nonce, sig)) = token.split_once('.') else {
            return false;
        };
        let Some(sig) = unhex(sig) else { return false };
        self.mac(nonce).verify_slice(&sig).is_ok()
    }

    /// An action's check: the form's token equals the cookie's, and this process signed it.
    pub fn check(&self, headers: &HeaderMap, form_token: Option<&str>) -> Result<(), AppError> {
        let refuse = || {
            AppError::Forbidden(
                "missing or invalid CSRF token: reload the page and try again".into(),
            )
        };
        let cookie = cookie(headers, CSRF_COOKIE).ok_or_else(refuse)?;
        let form = form_token.ok_or_else(refuse)?;
        if constant_time_eq(cookie.as_bytes(), form.as_bytes()) && self.valid(&cookie) {
            Ok(())
        } else {
            Err(refuse())
        }
    }
}

/// Middleware: hands the request's CSRF token to the handlers, setting the cookie when the
/// request had no valid one.
pub async fn csrf_layer(State(app): State<Arc<App>>, mut req: Request, next: Next) -> Response {
    let existing = cookie(req.headers(), CSRF_COOKIE).filter(|t| app.csrf.valid(t));
    let fresh = existing.is_none();
    let token = existing.unwrap_or_else(|| app.csrf.issue());
    req.extensions_mut().insert(CsrfToken(token.clone()));
    let mut resp = next.run(req).await;
    if fresh {
        // The base path: one cookie for the pages of every database.
        let base = app.cfg.prefix();
        let path = if base.is_empty() { "/" } else { base.as_str() };
        let c = format!("{CSRF_COOKIE}={token}; Path={path}; HttpOnly; SameSite=Strict");
        if let Ok(v) = HeaderValue::from_str(&c) {
            resp.headers_mut().append(SET_COOKIE, v);
        }
    }
    resp
}

/// Middleware: every request must carry the configured user:password.
pub async fn basic_auth_layer(State(app): State<Arc<App>>, req: Request, next: Next) -> Response {
    let Some(expected) = app.cfg.basic_auth.as_deref() else {
        return next.run(req).await;
    };
    let given = req
        .headers()
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Basic "))
        .and_then(|b| {
            base64::engine::general_purpose::STANDARD
                .decode(b.trim())
                .ok()
        });
    match given {
        Some(g) if constant_time_eq(&g, expected.as_bytes()) => next.run(req).await,
        _ => (
            StatusCode::UNAUTHORIZED,
            [(
                WWW_AUTHENTICATE,
                "Basic realm=\"jobq-dash\", charset=\"UTF-8\"",
            )],
            "authentication required\n",
        )
            .into_response(),
    }
}

/// The value of cookie `name` in the request's Cookie headers.
pub fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.to_string())
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_signed_by_this_process() {
        let a = Csrf::new();
        let t = a.issue();
        assert!(a.valid(&t));
        assert!(!Csrf::new().valid(&t), "another secret's token");
        let (nonce, _) = t.split_once('.').unwrap();
        assert!(!a.valid(&format!("{nonce}.00")));
        assert!(!a.valid("garbage"));
    }

    #[test]
    fn check_wants_cookie_and_field_equal() {
        let a = Csrf::new();
        let t = a.issue();
        let mut h = HeaderMap::new();
        h.insert(
            COOKIE,
            HeaderValue::from_str(&format!("x=1; {CSRF_COOKIE}={t}")).unwrap(),
        );
        assert!(a.check(&h, Some(&t)).is_ok());
        assert!(a.check(&h, None).is_err());
        assert!(
            a.check(&h, Some(&a.issue())).is_err(),
            "a valid token that is not the cookie's"
        );
        assert!(a.check(&HeaderMap::new(), Some(&t)).is_err(), "no cookie");
    }
}
