//! The reference master's HTTP side: master protocol v1's routes over a [`MasterState`].
//!
//! Jobs whose framework has no scaling API can run this next to their workers
//! (`colocate example-master`, over a worker Deployment), and integrators can copy it. The
//! protocol logic is the [`MasterState`] ledger; the handlers here only add the bearer token
//! check, body parsing and status codes.

use std::future::Future;
use std::io;
use std::net::SocketAddr;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::header::{AUTHORIZATION, WWW_AUTHENTICATE};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::serve::Listener;
use axum::{Json, Router};

use crate::master_protocol::{
    BackendError, ErrorBody, MasterConfig, MasterState, OutOfBoundsBody, ScaleCommand, ScaleError, WorkerBackend,
    MAX_COMMAND_ID,
};

/// The protocol's routes over `state`.
pub fn router<B: WorkerBackend>(state: MasterState<B>) -> Router {
    Router::new()
        .route("/v1/status", get(status::<B>))
        .route("/v1/scale", post(scale::<B>))
        .fallback(|| async {
            error(StatusCode::NOT_FOUND, "not found: master protocol v1 serves GET /v1/status and POST /v1/scale", None)
        })
        .with_state(state)
}

/// Serves the protocol on `listener` (a `TcpListener`, or a [`TlsListener`] for https) until
/// the process ends.
///
/// [`TlsListener`]: super::tls_listener::TlsListener
pub async fn serve<B, L>(listener: L, state: MasterState<B>) -> io::Result<()>
where
    B: WorkerBackend,
    L: Listener<Addr = SocketAddr>,
{
    axum::serve(listener, router(state)).await
}

/// Serves until `shutdown` completes, then finishes the requests in flight.
pub async fn serve_with_shutdown<B, L, F>(listener: L, state: MasterState<B>, shutdown: F) -> io::Result<()>
where
    B: WorkerBackend,
    L: Listener<Addr = SocketAddr>,
    F: Future<Output = ()> + Send + 'static,
{
    axum::serve(listener, router(state)).with_graceful_shutdown(shutdown).await
}

async fn status<B: WorkerBackend>(State(state): State<MasterState<B>>, headers: HeaderMap) -> Response {
    if let Some(refused) = refusal(&state.config(), &headers) {
        return refused;
    }
    match state.status().await {
        Ok(status) => Json(status).into_response(),
        Err(e) => unavailable(&e),
    }
}

async fn scale<B: WorkerBackend>(State(state): State<MasterState<B>>, headers: HeaderMap, body: Bytes) -> Response {
    if let Some(refused) = refusal(&state.config(), &headers) {
        return refused;
    }
    let command = match parse_command(&body) {
        Ok(c) => c,
        Err((field, message)) => return error(StatusCode::BAD_REQUEST, &message, field),
    };
    match state.scale(&command).await {
        Ok(answer) => (StatusCode::ACCEPTED, Json(answer)).into_response(),
        Err(e @ ScaleError::OutOfBounds { min, max, .. }) => {
            (StatusCode::CONFLICT, Json(OutOfBoundsBody { error: e.to_string(), min, max })).into_response()
        }
        Err(e @ ScaleError::BadCommandId(_)) => {
            error(StatusCode::BAD_REQUEST, &e.to_string(), Some("command_id".into()))
        }
        Err(ScaleError::Backend(e)) => unavailable(&e),
    }
}

/// Parses a scale request; on failure, the field to blame (when there is one) and a message
/// that names it. Unknown fields are ignored (the contract lets fields be added).
fn parse_command(body: &[u8]) -> Result<ScaleCommand, (Option<String>, String)> {
    let de = &mut serde_json::Deserializer::from_slice(body);
    let command: ScaleCommand = match serde_path_to_error::deserialize(&mut *de) {
        Ok(c) => c,
        Err(e) => {
            let path = e.path().to_string();
            let inner = e.into_inner().to_string();
            return Err(if path == "." {
                // A missing field is reported at the enclosing object; its name is in the text.
                let missing = inner.strip_prefix("missing field `").and_then(|r| r.split('`').next()).map(String::from);
                let message = if missing.is_some() { inner } else { format!("body: {inner}") };
                (missing, message)
            } else {
                let message = format!("{path}: {inner}");
                (Some(path), message)
            });
        }
    };
    de.end().map_err(|e| (None, format!("body: {e}")))?;
    if command.command_id.is_empty() || command.command_id.len() > MAX_COMMAND_ID {
        let message = format!("command_id: must be 1 to {MAX_COMMAND_ID} bytes, got {}", command.command_id.len());
        return Err((Some("command_id".to_string()), message));
    }
    Ok(command)
}

/// The 401 answer when a token is configured and the request lacks it. The comparison takes the
/// same time wherever the first difference is, so the token cannot be guessed byte by byte from
/// response times.
fn refusal(config: &MasterConfig, headers: &HeaderMap) -> Option<Response> {
    let expected = config.token.as_ref()?;
    let presented = headers.get(AUTHORIZATION).and_then(|v| v.to_str().ok()).and_then(|v| {
        let (scheme, token) = v.trim().split_once(' ')?;
        scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
    });
    let message = match presented {
        Some(token) if constant_time_eq(token.as_bytes(), expected.as_bytes()) => return None,
        Some(_) => "wrong bearer token",
        None => "missing bearer token (Authorization: Bearer <token>)",
    };
    let mut response = error(StatusCode::UNAUTHORIZED, message, None);
    response.headers_mut().insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    Some(response)
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = a.len() ^ b.len();
    for i in 0..a.len().max(b.len()) {
        let x = a.get(i).copied().unwrap_or(0);
        let y = b.get(i).copied().unwrap_or(0);
        diff |= usize::from(x ^ y);
    }
    std::hint::black_box(diff) == 0
}

fn unavailable(e: &BackendError) -> Response {
    tracing::warn!(error = %e, "worker backend failed");
    error(StatusCode::SERVICE_UNAVAILABLE, &e.to_string(), None)
}

fn error(status: StatusCode, message: &str, field: Option<String>) -> Response {
    (status, Json(ErrorBody { error: message.to_string(), field })).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constant_time_eq_compares_whole_strings() {
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secret", b"secreT"));
        assert!(!constant_time_eq(b"secret", b"secret2"));
        assert!(!constant_time_eq(b"", b"x"));
        assert!(constant_time_eq(b"", b""));
    }

    #[test]
    fn parse_errors_name_the_field() {
        let field = |body: &str| parse_command(body.as_bytes()).unwrap_err().0;
        assert_eq!(
            field(r#"{"command_id": "a", "target": "4", "reason": "r", "deadline_s": 1}"#).as_deref(),
            Some("target")
        );
        assert_eq!(field(r#"{"target": 4, "reason": "r", "deadline_s": 1}"#).as_deref(), Some("command_id"));
        assert_eq!(
            field(r#"{"command_id": "a", "target": 4, "reason": "r", "deadline_s": 1, "release_pods": ["a", 3]}"#)
                .as_deref(),
            Some("release_pods[1]")
        );
        assert_eq!(
            field(r#"{"command_id": "", "target": 4, "reason": "r", "deadline_s": 1}"#).as_deref(),
            Some("command_id")
        );
        assert_eq!(field("not json"), None);
        assert_eq!(field(r#"{"command_id": "a", "target": 4, "reason": "r", "deadline_s": 1} x"#), None);
        let ok = parse_command(br#"{"command_id": "a", "target": 4, "reason": "r", "deadline_s": 1, "extra": true}"#);
        assert_eq!(ok.unwrap().target, 4);
    }
}
