# deltapilot's container image: `deltapilot run` as a non-root user on a
# distroless runtime (no shell, no package manager), the data directory on a
# volume. CI lints this file with hadolint and checks every path, flag and
# variable it names against the repo and the binary (server/tests/deploy_image.rs);
# no image is built in CI.
#
#   docker build -t deltapilot:dev .

# The toolchain rust-toolchain.toml pins (the test checks the two agree).
FROM rust:1.95.0-bookworm AS build
# librdkafka (bundled by the rdkafka crate) runs a configure script that needs
# python3; the compilers come with the image. The Debian release is pinned by the
# image tag, so the package versions are that release's.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# zlib is linked statically, and OpenSSL (Kafka TLS and SASL) is built from
# source by the rdkafka crate and linked statically too (perl and make come with
# the image), so the runtime needs nothing beyond glibc and libgcc.
ENV LIBZ_SYS_STATIC=1
RUN cargo build --release --locked -p deltapilot-server --bin deltapilot \
    && mkdir -p /out/var/lib/deltapilot \
    && cp target/release/deltapilot /out/deltapilot

# glibc and libgcc, nothing else; user 65532 (nonroot).
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /out/deltapilot /usr/local/bin/deltapilot
COPY --from=build --chown=65532:65532 /out/var/lib/deltapilot /var/lib/deltapilot
USER 65532:65532
# Listen on every interface inside the container (the binary defaults to
# loopback); /debug/* stays off on a non-loopback admin address.
ENV DELTAPILOT_XDS_ADDR=0.0.0.0:18000 \
    DELTAPILOT_ADMIN_ADDR=0.0.0.0:15014 \
    DELTAPILOT_DATA_DIR=/var/lib/deltapilot
VOLUME ["/var/lib/deltapilot"]
# xDS gRPC, admin HTTP (/healthz, /readyz, /metrics).
EXPOSE 18000 15014
ENTRYPOINT ["/usr/local/bin/deltapilot"]
CMD ["run"]
