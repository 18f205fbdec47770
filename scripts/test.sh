#!/usr/bin/env bash
# The test command (README "Test"): everything CI runs, from a fresh Debian machine
# that has the Rust toolchain, python3 and pip.
#
#   1. installs the real peers (apt build deps, Tansu, Envoy, grpcio, the
#      go-control-plane peer) outside the repo;
#   2. starts a Tansu broker on a free 127.0.0.1 port for the Kafka-backed tests;
#   3. checks formatting and lints (clippy -D warnings);
#   4. runs the whole test suite.
#
# Tests that need a peer read DELTAPILOT_KAFKA_BROKERS, DELTAPILOT_ENVOY,
# DELTAPILOT_GRPC_PYTHON and DELTAPILOT_GCP_PEER, and FAIL (never skip) when one is
# missing.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

echo "== installing test peers" >&2
eval "$(bash scripts/install-test-deps.sh)"

# A private run dir so this run's broker never collides with another's.
DELTAPILOT_RUN_DIR="$(mktemp -d "${TMPDIR:-/tmp}/deltapilot-test.XXXXXX")"
export DELTAPILOT_RUN_DIR
port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
cleanup() {
    bash scripts/tansu.sh stop || true
    rm -rf "$DELTAPILOT_RUN_DIR"
}
trap cleanup EXIT
echo "== starting Tansu on 127.0.0.1:$port" >&2
bash scripts/tansu.sh start "$port"
export DELTAPILOT_KAFKA_BROKERS="127.0.0.1:$port"

echo "== cargo fmt --check" >&2
cargo fmt --all --check

echo "== cargo clippy -D warnings" >&2
cargo clippy --workspace --all-targets --locked -- -D warnings

echo "== cargo test" >&2
cargo test --workspace --locked --no-fail-fast
