//! Serves a scenario service's request rate in real time, as an NGINX exporter serves its
//! request counter: `GET /metrics` answers `spike_requests_total`, the integral of the
//! scenario's load from when the exporter started. Scenario time runs with the wall clock from
//! the window's start (`start_window`); before it, the load holds at the window's first value.
//! A real Prometheus scrapes it and the controller queries the rate, so the load signal reaches
//! `colocate run` through the same pipeline as in production.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use colocate::sim::load::LoadCurve;

use super::metrics_server::MetricsServer;

pub const METRIC: &str = "spike_requests_total";

struct State {
    curve: LoadCurve,
    from_s: f64,
    /// When scenario time `from_s` was (the window's start), once known.
    window_start: Option<Instant>,
    /// Scenario time and counter at the last update.
    last_t: f64,
    total: f64,
    last_update: Instant,
}

impl State {
    fn scenario_time(&self, at: Instant) -> f64 {
        match self.window_start {
            Some(start) if at >= start => self.from_s + at.duration_since(start).as_secs_f64(),
            _ => self.from_s,
        }
    }

    /// Brings the counter up to `now`: the load integrated over the wall time since the last
    /// update (before the window, at the window's first value), exactly as replay integrates
    /// it (`LoadCurve::mean`).
    fn advance(&mut self, now: Instant) {
        // A scrape between the caller's clock read and its lock may have advanced past `now`.
        let now = now.max(self.last_update);
        let wall = now.duration_since(self.last_update).as_secs_f64();
        let to = self.scenario_time(now);
        let held = (wall - (to - self.last_t)).max(0.0);
        self.total += held * self.curve.at(self.from_s);
        if to > self.last_t {
            self.total += self.curve.mean(self.last_t, to) * (to - self.last_t);
        }
        self.last_t = to;
        self.last_update = now;
    }
}

pub struct LoadExporter {
    state: Arc<Mutex<State>>,
    server: MetricsServer,
}

impl LoadExporter {
    pub async fn start(curve: LoadCurve, from_s: f64) -> LoadExporter {
        let now = Instant::now();
        // An hour of requests already counted: a counter that Prometheus first sees near zero
        // makes `rate()` assume it started within the window and report less at first, which
        // reads as a rising load.
        let total = curve.at(from_s) * 3600.0;
        let state =
            Arc::new(Mutex::new(State { curve, from_s, window_start: None, last_t: from_s, total, last_update: now }));
        let served = state.clone();
        let server = MetricsServer::start(move || {
            let mut s = served.lock().unwrap();
            s.advance(Instant::now());
            format!("# TYPE {METRIC} counter\n{METRIC} {:.3}\n", s.total)
        });
        LoadExporter { state, server }
    }

    pub fn port(&self) -> u16 {
        self.server.port
    }

    /// A handle that reads the load the exporter serves at this moment.
    pub fn clock(&self) -> LoadClock {
        LoadClock(self.state.clone())
    }

    /// Scenario time starts running now.
    pub fn start_window(&self, at: Instant) {
        let mut s = self.state.lock().unwrap();
        s.advance(at);
        s.window_start = Some(at);
    }
}

/// The scenario's load at this moment of the exporter's scenario time (held at the window's
/// first value until the window opens), for what else the test derives from it.
#[derive(Clone)]
pub struct LoadClock(Arc<Mutex<State>>);

impl LoadClock {
    pub fn load_now(&self) -> f64 {
        let s = self.0.lock().unwrap();
        s.curve.at(s.scenario_time(Instant::now()))
    }
}
