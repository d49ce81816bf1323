//! Client of master protocol v1: what the controller's actuator uses to read a job's state and to
//! shrink or grow it.
//!
//! Every call is bounded: a per-request timeout, and a bounded number of attempts with jittered
//! exponential backoff ([`RetryPolicy`]) for failures a retry can cure (transport errors,
//! timeouts, 5xx). A `scale` retry resends the same `command_id`, so a command the master
//! applied before its answer was lost is not applied twice. Errors come as [`MasterError`],
//! whose [`kind`](MasterError::kind) labels metrics.

use std::path::{Path, PathBuf};
use std::time::Duration;

use reqwest::header::{HeaderValue, AUTHORIZATION};
use reqwest::{RequestBuilder, StatusCode, Url};
use serde::de::DeserializeOwned;

use super::retry::RetryPolicy;
use crate::live::tls::LoadedTls;
use crate::master_protocol::{
    CheckpointAccepted, CheckpointCommand, ErrorBody, OutOfBoundsBody, ScaleAccepted, ScaleCommand, Status,
};

/// How long one attempt may take by default (connect, request and the whole answer).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

/// Longest error text taken from a master's answer, so that a master answering with a large
/// HTML page does not flood logs.
const MAX_MESSAGE: usize = 300;

/// A request to a master that failed. Variants are what the controller does differently about
/// (and what a metric is labelled by): hold the job, fix its bounds, fix the credentials, or
/// report a broken master.
#[derive(Debug, thiserror::Error)]
pub enum MasterError {
    /// No connection could be made (refused, no route, DNS), after every attempt.
    #[error("master unreachable after {attempts} attempt(s): {message}")]
    Unreachable { attempts: u32, message: String },
    /// The master did not answer in time, on every attempt.
    #[error("master did not answer within {timeout:?} ({attempts} attempt(s))")]
    Timeout { attempts: u32, timeout: Duration },
    /// A connection was made but broke (reset, closed before the answer), on every attempt.
    #[error("connection to the master broke after {attempts} attempt(s): {message}")]
    Transport { attempts: u32, message: String },
    /// The TLS handshake failed: the master's certificate is not trusted (or not for its
    /// name), or it asked for a client certificate we do not have. Not retried.
    #[error("TLS with the master failed: {message}")]
    Tls { message: String },
    /// 401 or 403: the token is missing or wrong. Not retried.
    #[error("master refused the credentials ({status}): {message}")]
    Unauthorized { status: u16, message: String },
    /// 409 with the job's bounds: the target was outside `[min, max]`. Not retried.
    #[error("target outside the job's bounds [{min}, {max}]: {message}")]
    OutOfBounds { min: u32, max: u32, message: String },
    /// Any other 4xx (a 400 names the offending field in `message`). Not retried.
    #[error("master rejected the request ({status}): {message}")]
    Rejected { status: u16, message: String },
    /// 5xx on every attempt.
    #[error("master failed ({status}) after {attempts} attempt(s): {message}")]
    ServerError { status: u16, attempts: u32, message: String },
    /// A success whose body is not the protocol's, or an answer the protocol does not define
    /// (a redirect, 1xx). Not retried: the master is broken, not busy.
    #[error("unexpected answer from the master: {message}")]
    BadResponse { message: String },
}

impl MasterError {
    /// A stable label for metrics and logs.
    pub fn kind(&self) -> &'static str {
        match self {
            MasterError::Unreachable { .. } => "unreachable",
            MasterError::Timeout { .. } => "timeout",
            MasterError::Transport { .. } => "transport",
            MasterError::Tls { .. } => "tls",
            MasterError::Unauthorized { .. } => "unauthorized",
            MasterError::OutOfBounds { .. } => "out_of_bounds",
            MasterError::Rejected { .. } => "rejected",
            MasterError::ServerError { .. } => "server_error",
            MasterError::BadResponse { .. } => "bad_response",
        }
    }

    /// Whether another attempt might succeed (the client already retried these as configured).
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            MasterError::Unreachable { .. }
                | MasterError::Timeout { .. }
                | MasterError::Transport { .. }
                | MasterError::ServerError { .. }
        )
    }
}

/// A client that cannot be built: bad URL or unreadable token. Reported at start-up, naming
/// what to fix.
#[derive(Debug, thiserror::Error)]
pub enum ClientConfigError {
    #[error("master URL {url:?}: {message}")]
    BadUrl { url: String, message: String },
    #[error("cannot read the master token from {}: {message}", path.display())]
    TokenFile { path: PathBuf, message: String },
    #[error("the master token{} is empty", from_file(path))]
    EmptyToken { path: Option<PathBuf> },
    #[error("the master token{} is not a valid HTTP header value (control characters?)", from_file(path))]
    BadToken { path: Option<PathBuf> },
    #[error("cannot build the HTTP client: {0}")]
    Http(String),
}

/// Reads a bearer token from a file (a mounted Secret), trimming surrounding whitespace; an
/// unreadable file or an empty token is an error naming the file.
pub fn read_token_file(path: &Path) -> Result<String, ClientConfigError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| ClientConfigError::TokenFile { path: path.to_path_buf(), message: e.to_string() })?;
    let token = text.trim();
    if token.is_empty() {
        return Err(ClientConfigError::EmptyToken { path: Some(path.to_path_buf()) });
    }
    Ok(token.to_string())
}

fn from_file(path: &Option<PathBuf>) -> String {
    path.as_ref().map(|p| format!(" in {}", p.display())).unwrap_or_default()
}

/// Client of one job's master.
#[derive(Clone, Debug)]
pub struct MasterClient {
    http: reqwest::Client,
    base: String,
    auth: Option<HeaderValue>,
    timeout: Duration,
    retry: RetryPolicy,
}

impl MasterClient {
    /// A client for the master at `base_url` (`http://host:port` or `https://`, optionally with
    /// a path prefix), with [`DEFAULT_TIMEOUT`], the default [`RetryPolicy`], and TLS trusting
    /// the system's roots.
    pub fn new(base_url: &str) -> Result<MasterClient, ClientConfigError> {
        MasterClient::using(base_url, MasterClient::http_client(&LoadedTls::default())?)
    }

    /// The HTTP client masters are reached with, TLS as `tls` says: one is shared by every
    /// master. No proxy: masters are in-cluster addresses, and an HTTP_PROXY meant for the
    /// outside world must not capture them. No redirects: the protocol defines none, and
    /// following one would resend a POST somewhere else.
    pub fn http_client(tls: &LoadedTls) -> Result<reqwest::Client, ClientConfigError> {
        tls.client_builder()
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| ClientConfigError::Http(chain(&e)))
    }

    /// A client for the master at `base_url` sending through `http` (from
    /// [`MasterClient::http_client`]).
    pub fn using(base_url: &str, http: reqwest::Client) -> Result<MasterClient, ClientConfigError> {
        let bad = |message: &str| ClientConfigError::BadUrl { url: base_url.to_string(), message: message.to_string() };
        let url = Url::parse(base_url).map_err(|e| bad(&e.to_string()))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(bad("only http:// and https:// are supported"));
        }
        if url.host_str().is_none() {
            return Err(bad("no host"));
        }
        if url.query().is_some() || url.fragment().is_some() {
            return Err(bad("a base URL takes no query or fragment"));
        }
        Ok(MasterClient {
            http,
            base: url.as_str().trim_end_matches('/').to_string(),
            auth: None,
            timeout: DEFAULT_TIMEOUT,
            retry: RetryPolicy::default(),
        })
    }

    /// Sends `Authorization: Bearer <token>` (trimmed) on every request.
    pub fn with_token(self, token: &str) -> Result<MasterClient, ClientConfigError> {
        self.set_token(token.trim(), None)
    }

    /// Reads the bearer token from a file (a mounted Secret), once ([`read_token_file`]).
    pub fn with_token_file(self, path: &Path) -> Result<MasterClient, ClientConfigError> {
        let token = read_token_file(path)?;
        self.set_token(&token, Some(path))
    }

    fn set_token(mut self, token: &str, path: Option<&Path>) -> Result<MasterClient, ClientConfigError> {
        if token.is_empty() {
            return Err(ClientConfigError::EmptyToken { path: path.map(Path::to_path_buf) });
        }
        let mut value = HeaderValue::from_str(&format!("Bearer {token}"))
            .map_err(|_| ClientConfigError::BadToken { path: path.map(Path::to_path_buf) })?;
        // Keeps the token out of debug output.
        value.set_sensitive(true);
        self.auth = Some(value);
        Ok(self)
    }

    /// Time one attempt may take, from connecting to the end of the answer.
    pub fn with_timeout(mut self, timeout: Duration) -> MasterClient {
        self.timeout = timeout;
        self
    }

    pub fn with_retry(mut self, retry: RetryPolicy) -> MasterClient {
        self.retry = RetryPolicy { max_attempts: retry.max_attempts.max(1), ..retry };
        self
    }

    /// The base URL, without a trailing slash.
    pub fn base_url(&self) -> &str {
        &self.base
    }

    /// `GET /v1/status`.
    #[tracing::instrument(level = "debug", skip_all, fields(master = %self.base))]
    pub async fn status(&self) -> Result<Status, MasterError> {
        let url = format!("{}/v1/status", self.base);
        self.call("status", || self.http.get(&url)).await
    }

    /// `POST /v1/scale`. Every attempt carries `command.command_id` unchanged, so a retry of a
    /// command the master already applied returns its original answer and changes nothing.
    #[tracing::instrument(level = "debug", skip_all,
        fields(master = %self.base, command_id = %command.command_id, target = command.target))]
    pub async fn scale(&self, command: &ScaleCommand) -> Result<ScaleAccepted, MasterError> {
        let url = format!("{}/v1/scale", self.base);
        self.call(&command.command_id, || self.http.post(&url).json(command)).await
    }

    /// v1.2 `POST /v1/checkpoint`: the master checkpoints after the step in progress. Retried
    /// like a scale command, with the same `command_id` on every attempt.
    #[tracing::instrument(level = "debug", skip_all, fields(master = %self.base, command_id = %command.command_id))]
    pub async fn checkpoint(&self, command: &CheckpointCommand) -> Result<CheckpointAccepted, MasterError> {
        let url = format!("{}/v1/checkpoint", self.base);
        self.call(&command.command_id, || self.http.post(&url).json(command)).await
    }

    /// Runs attempts until one succeeds, one fails for good, or the attempts run out. `key`
    /// seeds the backoff jitter.
    async fn call<T: DeserializeOwned>(
        &self,
        key: &str,
        request: impl Fn() -> RequestBuilder,
    ) -> Result<T, MasterError> {
        let mut attempt = 1;
        loop {
            let mut req = request().timeout(self.timeout);
            if let Some(auth) = &self.auth {
                req = req.header(AUTHORIZATION, auth.clone());
            }
            let error = match self.attempt(req, attempt).await {
                Ok(value) => return Ok(value),
                Err(e) if !e.is_transient() || attempt >= self.retry.max_attempts => return Err(e),
                Err(e) => e,
            };
            let pause = self.retry.backoff(key, attempt);
            tracing::debug!(attempt, error = %error, ?pause, "retrying the master");
            tokio::time::sleep(pause).await;
            attempt += 1;
        }
    }

    async fn attempt<T: DeserializeOwned>(&self, req: RequestBuilder, attempts: u32) -> Result<T, MasterError> {
        let transport = |e: reqwest::Error| {
            if e.is_timeout() {
                MasterError::Timeout { attempts, timeout: self.timeout }
            } else if is_tls_failure(&e) {
                MasterError::Tls { message: chain(&e) }
            } else if e.is_connect() {
                MasterError::Unreachable { attempts, message: chain(&e) }
            } else {
                MasterError::Transport { attempts, message: chain(&e) }
            }
        };
        let response = req.send().await.map_err(transport)?;
        let status = response.status();
        // The body is read under the same timeout; a master that stalls mid-answer times out.
        let body = response.bytes().await.map_err(transport)?;
        if status.is_success() {
            return parse(&body);
        }
        let message = error_message(&body);
        Err(match status {
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => {
                MasterError::Unauthorized { status: status.as_u16(), message }
            }
            StatusCode::CONFLICT => match serde_json::from_slice::<OutOfBoundsBody>(&body) {
                Ok(b) => MasterError::OutOfBounds { min: b.min, max: b.max, message: b.error },
                Err(_) => MasterError::Rejected { status: status.as_u16(), message },
            },
            s if s.is_client_error() => MasterError::Rejected { status: s.as_u16(), message },
            s if s.is_server_error() => MasterError::ServerError { status: s.as_u16(), attempts, message },
            s => MasterError::BadResponse { message: format!("status {s}: {message}") },
        })
    }
}

/// Whether rustls refused the connection somewhere down the error's causes. io::Errors carry
/// it (hyper-rustls wraps one io::Error in another) and hide what they wrap from `source()`.
fn is_tls_failure(e: &reqwest::Error) -> bool {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cause {
        let mut inner = c;
        loop {
            if inner.is::<rustls::Error>() {
                return true;
            }
            match inner.downcast_ref::<std::io::Error>().and_then(|io| io.get_ref()) {
                Some(wrapped) => inner = wrapped,
                None => break,
            }
        }
        cause = c.source();
    }
    false
}

/// Parses a success body, naming the field that does not fit the protocol.
fn parse<T: DeserializeOwned>(body: &[u8]) -> Result<T, MasterError> {
    let de = &mut serde_json::Deserializer::from_slice(body);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let message = if path == "." { e.inner().to_string() } else { format!("{path}: {}", e.inner()) };
        MasterError::BadResponse { message }
    })
}

/// The `error` (and `field`) of a JSON error body, or the start of the body as text.
fn error_message(body: &[u8]) -> String {
    let text = match serde_json::from_slice::<ErrorBody>(body) {
        Ok(ErrorBody { error, field: Some(field) }) if !error.contains(field.as_str()) => format!("{field}: {error}"),
        Ok(b) => b.error,
        Err(_) => String::from_utf8_lossy(body).trim().to_string(),
    };
    match text.char_indices().nth(MAX_MESSAGE) {
        Some((cut, _)) => format!("{}...", &text[..cut]),
        None if text.is_empty() => "(empty body)".to_string(),
        None => text,
    }
}

/// An error with its causes (reqwest's own message only says which URL failed).
fn chain(e: &reqwest::Error) -> String {
    crate::live::error_chain(e)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::MasterError;
    use crate::telemetry::metrics::ACTUATION_ERROR_KINDS;

    #[test]
    fn error_kind_list_matches_the_master_client() {
        let s = String::new;
        let errors = [
            MasterError::Unreachable { attempts: 1, message: s() },
            MasterError::Timeout { attempts: 1, timeout: Duration::ZERO },
            MasterError::Transport { attempts: 1, message: s() },
            MasterError::Unauthorized { status: 401, message: s() },
            MasterError::OutOfBounds { min: 1, max: 2, message: s() },
            MasterError::Rejected { status: 400, message: s() },
            MasterError::ServerError { status: 500, attempts: 1, message: s() },
            MasterError::BadResponse { message: s() },
        ];
        let kinds: Vec<&str> = errors.iter().map(MasterError::kind).collect();
        assert_eq!(kinds, ACTUATION_ERROR_KINDS);
    }
}
