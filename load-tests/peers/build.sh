#!/usr/bin/env bash
# Builds the load generator's peers (servers it can measure side by side with
# deltapilot). Today one: the go-control-plane peer (go-control-plane/), built
# into $DELTAPILOT_TOOLS/bin/dp-gcp-peer (default ~/.cache/deltapilot-tools).
#
# Needs Go >= 1.26 and the Go module proxy (or a warm module cache). It is not
# part of the default test command. Idempotent: Go's build cache makes a second
# run take about a second; the binary is replaced atomically.
#
# Use it with:
#   export DELTAPILOT_GCP_PEER=$DELTAPILOT_TOOLS/bin/dp-gcp-peer
#   deltapilot loadgen --spawn --peer go-control-plane --scenario ...
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
TOOLS="${DELTAPILOT_TOOLS:-$HOME/.cache/deltapilot-tools}"
BIN="$TOOLS/bin"
OUT="$BIN/dp-gcp-peer"

if ! command -v go >/dev/null 2>&1; then
    echo "build.sh: no 'go' on PATH; the go-control-plane peer needs Go >= 1.26" >&2
    exit 1
fi
# The module says `go 1.26.0`; never let the go command fetch another toolchain.
export GOTOOLCHAIN=local
mkdir -p "$BIN"
start=$(date +%s)
(
    cd "$HERE/go-control-plane"
    # -mod=readonly: go.sum is the pin; a missing or changed hash is an error.
    go build -mod=readonly -trimpath -o "$OUT.tmp" .
)
mv -f "$OUT.tmp" "$OUT"
echo "built $OUT in $(( $(date +%s) - start )) s ($(go version | cut -d' ' -f3))"
echo "export DELTAPILOT_GCP_PEER=$OUT"
