# The controller image: `docker build -t colocate:0.1.0 .` from the repository root.
# Two stages: the Rust toolchain builds a release binary; the runtime is distroless (glibc,
# CA certificates, a nonroot user 65532, no shell or package manager), matching the chart's
# securityContext (runAsNonRoot, readOnlyRootFilesystem: the controller writes no files).
# CI plays the build stage without Docker: hack/docker/build-stage.sh.

# Debian 12 (bookworm) on both sides, so the binary's glibc matches the runtime's.
FROM rust:1.95-bookworm AS build
WORKDIR /src
# Dependencies first: this layer is rebuilt only when a manifest, Cargo.lock or a benchmark
# change. Cargo reads every target the manifests declare, so the benchmarks come in whole and
# both crates' sources are stubs.
COPY Cargo.toml Cargo.lock ./
COPY crates/core/Cargo.toml ./crates/core/
COPY benches ./benches
RUN mkdir -p src crates/core/src \
    && echo 'fn main() {}' > src/main.rs \
    && touch src/lib.rs crates/core/src/lib.rs \
    && cargo build --release --locked --bin colocate \
    && rm -rf src crates/core/src
COPY src ./src
COPY crates ./crates
# The default scenario of `colocate replay` is embedded at compile time.
COPY scenarios ./scenarios
RUN touch src/main.rs src/lib.rs crates/core/src/lib.rs \
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
