//! Log output of the long-running commands: `tracing` events to stderr, as text or as one JSON
//! object per line (for log pipelines). `RUST_LOG` filters (default `info`).

use colocate::live::config::LogFormat;
use tracing_subscriber::EnvFilter;

/// Installs the global subscriber; a second call (tests running two commands) is ignored.
pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    // A log line that cannot be written (stderr piped into `grep -m1`, a log shipper gone) is
    // dropped. By default tracing-subscriber reports it with `eprintln!`, which panics on the
    // same broken stderr inside whichever task logged: `run` then never finished shutting down.
    let builder =
        tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).log_internal_errors(false);
    let _ = match format {
        LogFormat::Text => builder.with_ansi(false).try_init(),
        LogFormat::Json => builder.json().with_current_span(true).with_span_list(false).try_init(),
    };
}
