//! Serves a service's request latency as a Prometheus histogram whose shape the test sets:
//! `guard_request_seconds_bucket{le}` (with `_sum` and `_count`), requests arriving at a steady
//! rate, a `slow` fraction of them taking `SLOW_S` and the rest `FAST_S`. A real Prometheus scrapes it and
//! the controller's latency query is a `histogram_quantile` over a window of its rate, so the
//! latency guard sees a p99 that lags the change by the query's window, as in production.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::metrics_server::MetricsServer;

pub const METRIC: &str = "guard_request_seconds";
/// Requests per second.
const RATE: f64 = 200.0;
/// Buckets' upper bounds, seconds (and `+Inf`).
const BOUNDS: [f64; 5] = [0.05, 0.1, 0.25, 0.5, 1.0];
const FAST_S: f64 = 0.02;
pub const SLOW_S: f64 = 0.4;

struct State {
    slow: f64,
    fast_count: f64,
    slow_count: f64,
    last_update: Instant,
}

impl State {
    fn advance(&mut self, now: Instant) {
        let requests = RATE * now.duration_since(self.last_update).as_secs_f64();
        self.slow_count += requests * self.slow;
        self.fast_count += requests * (1.0 - self.slow);
        self.last_update = now;
    }

    fn render(&self) -> String {
        let mut out = format!("# TYPE {METRIC} histogram\n");
        for le in &BOUNDS {
            let mut n = 0.0;
            if FAST_S <= *le {
                n += self.fast_count;
            }
            if SLOW_S <= *le {
                n += self.slow_count;
            }
            out += &format!("{METRIC}_bucket{{le=\"{le}\"}} {n:.3}\n");
        }
        let all = self.fast_count + self.slow_count;
        out += &format!("{METRIC}_bucket{{le=\"+Inf\"}} {all:.3}\n{METRIC}_count {all:.3}\n");
        out += &format!("{METRIC}_sum {:.3}\n", self.fast_count * FAST_S + self.slow_count * SLOW_S);
        out
    }
}

pub struct LatencyExporter {
    state: Arc<Mutex<State>>,
    server: MetricsServer,
}

impl LatencyExporter {
    /// Starts with every request fast and an hour of them already counted (a histogram that
    /// Prometheus first sees near zero reads as a rising rate).
    pub fn start() -> LatencyExporter {
        let fast_count = RATE * 3600.0;
        let state = Arc::new(Mutex::new(State { slow: 0.0, fast_count, slow_count: 0.0, last_update: Instant::now() }));
        let served = state.clone();
        let server = MetricsServer::start(move || {
            let mut s = served.lock().unwrap();
            s.advance(Instant::now());
            s.render()
        });
        LatencyExporter { state, server }
    }

    pub fn port(&self) -> u16 {
        self.server.port
    }

    /// From now on, `fraction` of the requests take `SLOW_S`.
    pub fn set_slow(&self, fraction: f64) {
        assert!((0.0..=1.0).contains(&fraction), "a fraction of requests: {fraction}");
        let mut s = self.state.lock().unwrap();
        s.advance(Instant::now());
        s.slow = fraction;
    }
}
