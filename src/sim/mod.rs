//! Simulated cluster and replay.
