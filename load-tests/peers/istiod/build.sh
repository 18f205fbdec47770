#!/usr/bin/env bash
# Builds Istio's pilot-discovery (istiod's xDS server) from the istio.io/istio
# module pinned in go.mod, for `deltapilot loadgen --peer istiod`. Heavy (a
# large dependency graph), so it is NOT run by ../build.sh, by
# scripts/install-test-deps.sh or by CI: run it by hand.
#
# One patch of ours is applied first (nokube.patch): at this commit istiod
# panics at start without Kubernetes (the ServiceEntry registry reads the
# namespaces of a Kubernetes config cluster that file-config mode never
# creates: a nil pointer). The patch gives it an empty namespace collection
# instead; nothing else changes. The module is copied out of the module cache,
# patched, and built through a `replace` in a temporary copy of go.mod.
#
# Needs Go >= 1.26 and the Go module proxy (or a warm module cache). Output:
# $OUT (default $DELTAPILOT_TOOLS/bin/pilot-discovery, DELTAPILOT_TOOLS
# defaulting to ~/.cache/deltapilot-tools), replaced atomically.
#
# Use it with:
#   export DELTAPILOT_ISTIOD_PEER=$OUT
#   deltapilot loadgen --spawn --peer istiod --scenario ...
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
TOOLS="${DELTAPILOT_TOOLS:-$HOME/.cache/deltapilot-tools}"
OUT="${OUT:-$TOOLS/bin/pilot-discovery}"

if ! command -v go >/dev/null 2>&1; then
    echo "istiod/build.sh: no 'go' on PATH; pilot-discovery needs Go >= 1.26" >&2
    exit 1
fi
# The module says `go 1.26.0`; a dependency needing a newer Go is an error to
# report, not a toolchain to fetch (set GOTOOLCHAIN yourself to override).
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"
# go.sum pins the module hashes (`go mod tidy`); -mod=mod lets the go command
# update the temporary go.mod that the `replace` below edits.
export GOFLAGS="${GOFLAGS:--mod=mod}"
mkdir -p "$(dirname "$OUT")"
start=$(date +%s)
WORK="$(mktemp -d -t istiod-build-XXXXXX)"
trap 'rm -rf "$WORK"' EXIT
SRC="$(cd "$HERE" && go mod download -json istio.io/istio | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')"
if [ ! -d "$SRC" ]; then
    echo "istiod/build.sh: could not download istio.io/istio (module dir '$SRC')" >&2
    exit 1
fi
cp -r "$SRC" "$WORK/istio"
chmod -R u+w "$WORK/istio"
patch -s -d "$WORK/istio" -p1 < "$HERE/nokube.patch"
mkdir "$WORK/mod"
cp "$HERE/go.mod" "$HERE/go.sum" "$HERE/tools.go" "$WORK/mod/"
(
    cd "$WORK/mod"
    go mod edit -replace "istio.io/istio=$WORK/istio"
    nice -n 15 go build -trimpath -o "$OUT.tmp" istio.io/istio/pilot/cmd/pilot-discovery
)
mv -f "$OUT.tmp" "$OUT"
echo "built $OUT in $(( $(date +%s) - start )) s ($(go version | cut -d' ' -f3))"
echo "export DELTAPILOT_ISTIOD_PEER=$OUT"
