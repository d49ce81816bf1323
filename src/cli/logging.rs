//! Log output of the long-running commands: `tracing` events to stderr, as text or as one JSON
//! object per line (for log pipelines). `RUST_LOG` filters (default `info`).

use colocate::live::config::LogFormat;
use tracing_subscriber::EnvFilter;

/// Installs the global subscriber; a second call (tests running two commands) is ignored.
pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder.with_ansi(false).try_init(),
        LogFormat::Json => builder.json().with_current_span(true).with_span_list(false).try_init(),
    };
}
