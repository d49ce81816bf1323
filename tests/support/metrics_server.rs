//! A `/metrics` endpoint for the test's own exporters, on its own thread and runtime: the
//! test's runtime blocks on kubectl calls now and then, and a scrape that times out makes
//! Prometheus mark the series stale, which skews the rates the controller reads.

use std::sync::Arc;

use axum::routing::get;
use axum::Router;

pub struct MetricsServer {
    pub port: u16,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl MetricsServer {
    /// Serves `render()` at `GET /metrics` on a free loopback port until dropped.
    pub fn start(render: impl Fn() -> String + Send + Sync + 'static) -> MetricsServer {
        let render = Arc::new(render);
        let app = Router::new().route(
            "/metrics",
            get(move || {
                let render = render.clone();
                async move { render() }
            }),
        );
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                let _ = axum::serve(listener, app)
                    .with_graceful_shutdown(async {
                        let _ = stopped.await;
                    })
                    .await;
            });
        });
        MetricsServer { port, stop: Some(stop) }
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}
