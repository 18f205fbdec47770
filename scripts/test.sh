#!/usr/bin/env bash
# The test command (README "Test"): everything CI runs, from a fresh Debian machine
# that has the Rust toolchain, python3 and pip.
#
#   1. installs the real peers (apt build deps, Apache Kafka, Tansu, Envoy, grpcio,
#      the go-control-plane peer) outside the repo;
#   2. starts an Apache Kafka broker on a free 127.0.0.1 port for the Kafka-backed
#      tests (DELTAPILOT_KAFKA_BROKERS), with an SSL and a SASL_SSL listener for the
#      security tests (DELTAPILOT_KAFKA_SSL_BROKERS, DELTAPILOT_KAFKA_SASL_BROKERS,
#      DELTAPILOT_KAFKA_TLS_DIR), and a Tansu broker on another for the one
#      Tansu smoke test (DELTAPILOT_TANSU_BROKERS);
#   3. checks formatting and lints (clippy -D warnings), and lints the packaging:
#      hadolint on the Dockerfile, `helm lint --strict` on the chart with its
#      default values and each deploy/helm/ci/*.yaml, and Prometheus's rule
#      parser on the alert rules;
#   4. runs the whole test suite.
#
# Tests that need a peer read DELTAPILOT_KAFKA_BROKERS (and the secured
# listeners' variables above), DELTAPILOT_TANSU_BROKERS,
# DELTAPILOT_ENVOY, DELTAPILOT_GRPC_PYTHON, DELTAPILOT_GCP_PEER,
# DELTAPILOT_GRPC_GO, DELTAPILOT_HELM, DELTAPILOT_HADOLINT and
# DELTAPILOT_RULECHECK, and FAIL (never skip) when one is missing.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

echo "== installing test peers" >&2
eval "$(bash scripts/install-test-deps.sh)"

# The packaging lints first: they take a second and need no broker. Each tool
# is required (set -u fails on an unset variable, a missing file fails to run).
echo "== hadolint Dockerfile" >&2
"$DELTAPILOT_HADOLINT" Dockerfile
echo "== helm lint --strict deploy/helm/deltapilot (default values, deploy/helm/ci/*.yaml)" >&2
"$DELTAPILOT_HELM" lint --strict deploy/helm/deltapilot
for values in deploy/helm/ci/*.yaml; do
    "$DELTAPILOT_HELM" lint --strict deploy/helm/deltapilot --values "$values"
done
echo "== alert rules (Prometheus's rule parser)" >&2
"$DELTAPILOT_RULECHECK" deploy/prometheus/deltapilot-rules.yaml

# A private run dir so this run's broker never collides with another's.
DELTAPILOT_RUN_DIR="$(mktemp -d "${TMPDIR:-/tmp}/deltapilot-test.XXXXXX")"
export DELTAPILOT_RUN_DIR
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
cleanup() {
    bash scripts/kafka.sh stop || true
    bash scripts/tansu.sh stop || true
    rm -rf "$DELTAPILOT_RUN_DIR"
}
trap cleanup EXIT
kafka_port="$(free_port)"
echo "== starting Apache Kafka on 127.0.0.1:$kafka_port (with SSL and SASL_SSL listeners)" >&2
DELTAPILOT_KAFKA_TLS=1 bash scripts/kafka.sh start "$kafka_port"
export DELTAPILOT_KAFKA_BROKERS="127.0.0.1:$kafka_port"
# DELTAPILOT_KAFKA_SSL_BROKERS, DELTAPILOT_KAFKA_SASL_BROKERS, DELTAPILOT_KAFKA_TLS_DIR
# (assigned first: a failing `env` would be masked inside eval's argument).
kafka_env="$(bash scripts/kafka.sh env)"
eval "$kafka_env"
tansu_port="$(free_port)"
echo "== starting Tansu on 127.0.0.1:$tansu_port (for the Tansu smoke test only)" >&2
bash scripts/tansu.sh start "$tansu_port"
export DELTAPILOT_TANSU_BROKERS="127.0.0.1:$tansu_port"

echo "== cargo fmt --check" >&2
cargo fmt --all --check

echo "== cargo clippy -D warnings" >&2
cargo clippy --workspace --all-targets --locked -- -D warnings

echo "== cargo test" >&2
cargo test --workspace --locked --no-fail-fast
