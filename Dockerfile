# The controller image: `docker build -t colocate:0.1.0 .` from the repository root.
# Two stages: the Rust toolchain builds a release binary; the runtime is distroless (glibc,
# CA certificates, a nonroot user 65532, no shell or package manager), matching the chart's
# securityContext (runAsNonRoot, readOnlyRootFilesystem: the controller writes no files).

# Debian 12 (bookworm) on both sides, so the binary's glibc matches the runtime's.
FROM rust:1.95-bookworm AS build
WORKDIR /src
# Dependencies first: this layer is rebuilt only when Cargo.toml or Cargo.lock change.
COPY Cargo.toml Cargo.lock ./
RUN mkdir -p src benches \
    && echo 'fn main() {}' > src/main.rs \
    && touch src/lib.rs benches/decide.rs benches/replay.rs \
    && cargo build --release --locked --bin colocate \
    && rm -rf src benches
COPY src ./src
COPY benches ./benches
# The default scenario of `colocate replay` is embedded at compile time.
COPY scenarios ./scenarios
RUN touch src/main.rs src/lib.rs \
    && cargo build --release --locked --bin colocate \
    && strip target/release/colocate \
    && ./target/release/colocate --version

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /src/target/release/colocate /usr/local/bin/colocate
USER 65532:65532
# /metrics, /healthz, /readyz (run.metrics_addr, 0.0.0.0:8080 by default).
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/colocate"]
CMD ["run"]
