//! Master protocol v1 against real servers on 127.0.0.1: the reference master over an in-memory
//! backend, and tiny faulty masters (an axum router answering 500/400, a TCP listener that never
//! answers, a port nobody listens on) for the client's retries and errors.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::http::StatusCode;
use axum::Router;
use colocate::live::master_client::{ClientConfigError, MasterClient, MasterError, RetryPolicy};
use colocate::master_protocol::{
    MasterConfig, MasterState, MemoryBackend, Phase, Progress, ScaleAccepted, ScaleCommand, Throughput,
    WorkerResources, Workers,
};
use colocate::reference_master::serve;
use serde_json::{json, Value};
use tokio::net::TcpListener;

const TOKEN: &str = "s3cret-token";

fn config() -> MasterConfig {
    let mut c = MasterConfig::new("wide-deep", 1, 32, WorkerResources::new("2", "4Gi"));
    c.rescale_cost_s = Some(10.0);
    c
}

/// A reference master on a free port; returns its base URL and state (to reach the backend).
async fn start(config: MasterConfig, backend: MemoryBackend) -> (String, MasterState<MemoryBackend>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let state = MasterState::new(config, backend).unwrap();
    tokio::spawn(serve(listener, state.clone()));
    (base, state)
}

/// Retries that keep the tests fast.
fn quick() -> RetryPolicy {
    RetryPolicy { max_attempts: 3, initial_backoff: Duration::from_millis(10), max_backoff: Duration::from_millis(40) }
}

fn client(base: &str) -> MasterClient {
    MasterClient::new(base).unwrap().with_timeout(Duration::from_secs(2)).with_retry(quick())
}

fn raw() -> reqwest::Client {
    colocate::live::tls::install_crypto_provider();
    reqwest::Client::builder().no_proxy().build().unwrap()
}

/// Posts `body` as is; returns the status and the JSON answer.
async fn post_raw(base: &str, body: &str, token: Option<&str>) -> (StatusCode, Value) {
    let mut req =
        raw().post(format!("{base}/v1/scale")).header("content-type", "application/json").body(body.to_string());
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let res = req.send().await.unwrap();
    let status = StatusCode::from_u16(res.status().as_u16()).unwrap();
    (status, res.json().await.unwrap())
}

#[tokio::test]
async fn status_round_trip() {
    let backend = MemoryBackend::new(6);
    backend.set_throughput(Some(Throughput { samples_per_s: 290.5 }));
    backend.set_progress(Some(Progress { done: 120000, total: 5000000 }));
    let (base, _state) = start(config(), backend).await;

    let s = client(&base).status().await.unwrap();
    assert_eq!(s.job, "wide-deep");
    assert_eq!(s.generation, 1);
    assert_eq!(s.phase, Phase::Running);
    assert_eq!(s.workers, Workers { current: 6, target: 6, min: 1, max: 32, pending: 0 });
    assert_eq!((s.worker_resources.cpu.as_str(), s.worker_resources.memory.as_str()), ("2", "4Gi"));
    assert_eq!(s.rescale_cost_s, Some(10.0));
    assert_eq!(s.throughput, Some(Throughput { samples_per_s: 290.5 }));
    assert_eq!(s.progress, Some(Progress { done: 120000, total: 5000000 }));

    // The names on the wire are the contract's.
    let v: Value = raw().get(format!("{base}/v1/status")).send().await.unwrap().json().await.unwrap();
    assert_eq!(
        v,
        json!({"job": "wide-deep", "generation": 1, "phase": "Running",
               "workers": {"current": 6, "target": 6, "min": 1, "max": 32, "pending": 0},
               "worker_resources": {"cpu": "2", "memory": "4Gi"}, "rescale_cost_s": 10.0,
               "throughput": {"samples_per_s": 290.5}, "progress": {"done": 120000, "total": 5000000}})
    );
}

#[tokio::test]
async fn scale_is_accepted_with_202_and_a_new_generation() {
    let (base, state) = start(config(), MemoryBackend::new(6)).await;
    let c = client(&base);

    let cmd =
        ScaleCommand::new(4, "online-headroom", 30).with_release_pods(["wide-deep-worker-5", "wide-deep-worker-3"]);
    assert_eq!(c.scale(&cmd).await.unwrap(), ScaleAccepted { accepted_target: 4, generation: 2 });
    let s = c.status().await.unwrap();
    assert_eq!((s.generation, s.workers.target, s.workers.current, s.phase), (2, 4, 4, Phase::Running));
    let seen = state.backend().commands();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].release_pods, ["wide-deep-worker-5", "wide-deep-worker-3"]);
    assert_eq!((seen[0].deadline_s, seen[0].reason.as_str()), (30, "online-headroom"));

    // The status code itself is 202.
    let (code, body) =
        post_raw(&base, r#"{"command_id": "raw-1", "target": 7, "reason": "grow", "deadline_s": 30}"#, None).await;
    assert_eq!(code, StatusCode::ACCEPTED);
    assert_eq!(body, json!({"accepted_target": 7, "generation": 3}));
}

#[tokio::test]
async fn same_command_id_is_accepted_once() {
    let (base, state) = start(config(), MemoryBackend::new(6)).await;
    let c = client(&base);
    let cmd = ScaleCommand::new(4, "online-headroom", 30);
    let first = c.scale(&cmd).await.unwrap();
    let again = c.scale(&cmd).await.unwrap();
    assert_eq!(first, again);
    // Reused with another target: still the first answer, nothing changes.
    let reused = c.scale(&ScaleCommand { target: 9, ..cmd.clone() }).await.unwrap();
    assert_eq!(reused, first);
    // Retries racing each other are applied once too.
    let racing = ScaleCommand::new(5, "online-headroom", 30);
    let answers = futures_join(&c, &racing, 8).await;
    assert!(answers.windows(2).all(|w| w[0] == w[1]), "{answers:?}");
    assert_eq!(state.backend().commands().len(), 2);
    let s = c.status().await.unwrap();
    assert_eq!((s.generation, s.workers.target), (3, 5));
    // A new command for the target the job already has changes nothing, generation included.
    let same = c.scale(&ScaleCommand::new(5, "hold", 30)).await.unwrap();
    assert_eq!(same, ScaleAccepted { accepted_target: 5, generation: 3 });
    assert_eq!(state.backend().commands().len(), 2);
}

/// Sends `cmd` `n` times at once.
async fn futures_join(c: &MasterClient, cmd: &ScaleCommand, n: usize) -> Vec<ScaleAccepted> {
    let mut tasks = Vec::new();
    for _ in 0..n {
        let (c, cmd) = (c.clone(), cmd.clone());
        tasks.push(tokio::spawn(async move { c.scale(&cmd).await.unwrap() }));
    }
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.unwrap());
    }
    out
}

#[tokio::test]
async fn the_memory_of_command_ids_is_bounded() {
    let mut cfg = config();
    cfg.remembered_commands = 2;
    let (base, _state) = start(cfg, MemoryBackend::new(6)).await;
    let c = client(&base);
    let a = ScaleCommand::new(4, "a", 30);
    assert_eq!(c.scale(&a).await.unwrap().generation, 2);
    for (target, gen) in [(5, 3), (6, 4)] {
        assert_eq!(c.scale(&ScaleCommand::new(target, "b", 30)).await.unwrap().generation, gen);
    }
    // `a` was forgotten (two newer ids): it is a new command again.
    assert_eq!(c.scale(&a).await.unwrap(), ScaleAccepted { accepted_target: 4, generation: 5 });
}

#[tokio::test]
async fn target_outside_bounds_is_409_with_the_bounds() {
    let (base, state) = start(config(), MemoryBackend::new(6)).await;
    let c = client(&base);
    for target in [0, 33] {
        match c.scale(&ScaleCommand::new(target, "grow", 30)).await {
            Err(e @ MasterError::OutOfBounds { min: 1, max: 32, .. }) => assert_eq!(e.kind(), "out_of_bounds"),
            other => panic!("target {target}: {other:?}"),
        }
    }
    let (code, body) =
        post_raw(&base, r#"{"command_id": "x", "target": 40, "reason": "r", "deadline_s": 30}"#, None).await;
    assert_eq!(code, StatusCode::CONFLICT);
    assert_eq!((body["min"].as_u64(), body["max"].as_u64()), (Some(1), Some(32)));
    assert!(body["error"].as_str().unwrap().contains("40"), "{body}");
    let s = c.status().await.unwrap();
    assert_eq!((s.generation, s.workers.target), (1, 6));
    assert!(state.backend().commands().is_empty());
}

#[tokio::test]
async fn malformed_body_is_400_naming_the_field() {
    let (base, state) = start(config(), MemoryBackend::new(6)).await;
    let cases = [
        (r#"{"command_id": "a", "target": "4", "reason": "r", "deadline_s": 30}"#, Some("target")),
        (r#"{"target": 4, "reason": "r", "deadline_s": 30}"#, Some("command_id")),
        (r#"{"command_id": "a", "target": -1, "reason": "r", "deadline_s": 30}"#, Some("target")),
        (r#"{"command_id": "a", "target": 4, "reason": "r"}"#, Some("deadline_s")),
        (
            r#"{"command_id": "a", "target": 4, "reason": "r", "deadline_s": 30, "release_pods": "w-1"}"#,
            Some("release_pods"),
        ),
        (r#"{"command_id": "", "target": 4, "reason": "r", "deadline_s": 30}"#, Some("command_id")),
        ("target=4", None),
    ];
    for (body, field) in cases {
        let (code, answer) = post_raw(&base, body, None).await;
        assert_eq!(code, StatusCode::BAD_REQUEST, "{body}");
        let error = answer["error"].as_str().unwrap();
        assert_eq!(answer["field"].as_str(), field, "{body}: {answer}");
        if let Some(f) = field {
            assert!(error.contains(f), "{body}: {error}");
        }
    }
    assert!(state.backend().commands().is_empty());
    // Fields added by a newer controller are ignored.
    let (code, _) =
        post_raw(&base, r#"{"command_id": "n", "target": 3, "reason": "r", "deadline_s": 30, "urgency": 2}"#, None)
            .await;
    assert_eq!(code, StatusCode::ACCEPTED);
}

#[tokio::test]
async fn bearer_token_is_required_when_configured() {
    let mut cfg = config();
    cfg.token = Some(TOKEN.to_string());
    let (base, state) = start(cfg, MemoryBackend::new(6)).await;

    let res = raw().get(format!("{base}/v1/status")).send().await.unwrap();
    assert_eq!(res.status().as_u16(), 401);
    assert_eq!(res.headers()["www-authenticate"], "Bearer");
    let (code, _) = post_raw(&base, r#"{"command_id": "a", "target": 4, "reason": "r", "deadline_s": 30}"#, None).await;
    assert_eq!(code, StatusCode::UNAUTHORIZED);

    let anonymous = client(&base);
    let wrong = client(&base).with_token("s3cret-tokeN").unwrap();
    let prefix = client(&base).with_token("s3cret").unwrap();
    for c in [&anonymous, &wrong, &prefix] {
        match c.status().await {
            Err(e @ MasterError::Unauthorized { status: 401, .. }) => assert_eq!(e.kind(), "unauthorized"),
            other => panic!("{other:?}"),
        }
        let refused = c.scale(&ScaleCommand::new(4, "r", 30)).await;
        assert!(matches!(refused, Err(MasterError::Unauthorized { .. })), "{refused:?}");
    }
    assert!(state.backend().commands().is_empty());

    let good = client(&base).with_token(TOKEN).unwrap();
    assert_eq!(good.status().await.unwrap().workers.target, 6);
    assert_eq!(good.scale(&ScaleCommand::new(4, "r", 30)).await.unwrap().accepted_target, 4);
    // The scheme is case-insensitive (RFC 7235).
    let res = raw().get(format!("{base}/v1/status")).header("authorization", format!("bearer {TOKEN}")).send().await;
    assert_eq!(res.unwrap().status().as_u16(), 200);
}

#[tokio::test]
async fn token_is_read_from_a_file_and_trimmed() {
    let mut cfg = config();
    cfg.token = Some(TOKEN.to_string());
    let (base, _state) = start(cfg, MemoryBackend::new(6)).await;

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("token");
    std::fs::write(&file, format!("  {TOKEN}\n\n")).unwrap();
    let c = client(&base).with_token_file(&file).unwrap();
    assert_eq!(c.status().await.unwrap().job, "wide-deep");

    let missing = dir.path().join("missing-token");
    let e = client(&base).with_token_file(&missing).unwrap_err();
    assert!(matches!(e, ClientConfigError::TokenFile { .. }), "{e:?}");
    assert!(e.to_string().contains(&missing.display().to_string()), "{e}");

    let empty = dir.path().join("empty");
    std::fs::write(&empty, " \n").unwrap();
    let e = client(&base).with_token_file(&empty).unwrap_err();
    assert!(matches!(e, ClientConfigError::EmptyToken { .. }) && e.to_string().contains("empty"), "{e}");
}

#[tokio::test]
async fn phase_is_rescaling_until_workers_catch_up_and_generation_follows_outside_changes() {
    let (base, state) = start(config(), MemoryBackend::lagging(6)).await;
    let c = client(&base);
    c.scale(&ScaleCommand::new(8, "grow", 30)).await.unwrap();
    let s = c.status().await.unwrap();
    assert_eq!((s.phase, s.workers.current, s.workers.target, s.workers.pending), (Phase::Rescaling, 6, 8, 2));
    state.backend().set_current(8);
    let s = c.status().await.unwrap();
    assert_eq!((s.phase, s.generation), (Phase::Running, 2));

    // Someone scales the workers behind the master's back: a new target, a new generation.
    state.backend().set_target(10);
    state.backend().set_current(10);
    let s = c.status().await.unwrap();
    assert_eq!((s.workers.target, s.generation), (10, 3));

    state.backend().set_phase(Some(Phase::Completed));
    assert_eq!(c.status().await.unwrap().phase, Phase::Completed);
}

/// A master that answers from `answer(n)` for the n-th request (0-based) and records each body.
async fn fault_master(answer: fn(usize) -> (u16, &'static str)) -> (String, Arc<Mutex<Vec<String>>>) {
    let bodies = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&bodies);
    let app = Router::new().fallback(move |body: Bytes| {
        let seen = Arc::clone(&seen);
        async move {
            let mut b = seen.lock().unwrap();
            b.push(String::from_utf8_lossy(&body).to_string());
            let (code, text) = answer(b.len() - 1);
            (StatusCode::from_u16(code).unwrap(), [("content-type", "application/json")], text)
        }
    });
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (base, bodies)
}

fn command_ids(bodies: &Mutex<Vec<String>>) -> Vec<String> {
    let bodies = bodies.lock().unwrap();
    bodies
        .iter()
        .map(|b| serde_json::from_str::<Value>(b).unwrap()["command_id"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn client_retries_5xx_with_the_same_command_id() {
    let (base, bodies) = fault_master(|n| match n {
        0 | 1 => (500, r#"{"error": "busy"}"#),
        _ => (202, r#"{"accepted_target": 4, "generation": 13}"#),
    })
    .await;
    let cmd = ScaleCommand::new(4, "online-headroom", 30);
    assert_eq!(client(&base).scale(&cmd).await.unwrap(), ScaleAccepted { accepted_target: 4, generation: 13 });
    assert_eq!(command_ids(&bodies), vec![cmd.command_id.clone(); 3]);

    // Attempts are bounded: a master failing every time is reported after `max_attempts`.
    let (base, bodies) = fault_master(|_| (503, r#"{"error": "backend down"}"#)).await;
    match client(&base).scale(&cmd).await {
        Err(e @ MasterError::ServerError { status: 503, attempts: 3, .. }) => {
            assert_eq!(e.kind(), "server_error");
            assert!(e.to_string().contains("backend down"), "{e}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(command_ids(&bodies), vec![cmd.command_id.clone(); 3]);
}

#[tokio::test]
async fn client_never_retries_4xx_and_reports_bad_bodies() {
    let (base, bodies) = fault_master(|_| (400, r#"{"error": "target: invalid type", "field": "target"}"#)).await;
    match client(&base).scale(&ScaleCommand::new(4, "r", 30)).await {
        Err(MasterError::Rejected { status: 400, message }) => assert!(message.contains("target"), "{message}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(bodies.lock().unwrap().len(), 1);

    let (base, bodies) = fault_master(|_| (200, r#"{"job": "j", "generation": "twelve"}"#)).await;
    match client(&base).status().await {
        Err(e @ MasterError::BadResponse { .. }) => assert!(e.to_string().contains("generation"), "{e}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(bodies.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn client_times_out_against_a_master_that_never_answers() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&accepted);
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            held.push(socket); // never read, never answered, never closed
        }
    });
    let c = MasterClient::new(&base)
        .unwrap()
        .with_timeout(Duration::from_millis(200))
        .with_retry(RetryPolicy { max_attempts: 2, ..quick() });
    let started = Instant::now();
    // The outer limit turns a client that would wait forever into a failure, not a hung test.
    let result = tokio::time::timeout(Duration::from_secs(5), c.scale(&ScaleCommand::new(4, "r", 30))).await;
    let took = started.elapsed();
    match result.expect("the client's own timeout never fired") {
        Err(e @ MasterError::Timeout { attempts: 2, .. }) => assert_eq!(e.kind(), "timeout"),
        other => panic!("{other:?}"),
    }
    assert!(took >= Duration::from_millis(400) && took < Duration::from_secs(3), "{took:?}");
    assert_eq!(accepted.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn client_reports_an_unreachable_master_after_bounded_retries() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    drop(listener); // nothing listens there now
    let c = client(&base);
    let started = Instant::now();
    match tokio::time::timeout(Duration::from_secs(5), c.status()).await.expect("the client did not give up") {
        Err(e @ MasterError::Unreachable { attempts: 3, .. }) => {
            assert_eq!(e.kind(), "unreachable");
            assert!(e.is_transient());
        }
        other => panic!("{other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(3), "{:?}", started.elapsed());
}

#[tokio::test]
async fn client_rejects_urls_it_cannot_use() {
    for url in ["ftp://master:8080", "not a url", "http://master:8080/?x=1", "https://:8443"] {
        assert!(matches!(MasterClient::new(url), Err(ClientConfigError::BadUrl { .. })), "{url}");
    }
    assert_eq!(MasterClient::new("http://master:8080/prefix/").unwrap().base_url(), "http://master:8080/prefix");
    assert_eq!(MasterClient::new("https://master:8443").unwrap().base_url(), "https://master:8443");
}
