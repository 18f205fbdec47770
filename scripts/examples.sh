#!/usr/bin/env bash
# Rewrites every examples/envoy-*.yaml from the `deltapilot bootstrap` command on
# its `# $ deltapilot bootstrap ...` header line: the file keeps its leading
# comment block and everything below it becomes that command's output. The
# examples are never edited by hand; server/tests/bootstrap_cli.rs runs the same
# commands and fails with a diff when a committed file differs.
#
# Usage: bash scripts/examples.sh   (builds the debug binary first, unless
# DELTAPILOT_BIN names one)
set -euo pipefail
LOG_TAG=examples
# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/lib.sh"
cd "$(dirname "$0")/.."

if [[ -z "${DELTAPILOT_BIN:-}" ]]; then
    cargo build -q -p deltapilot-server --bin deltapilot
    DELTAPILOT_BIN="${CARGO_TARGET_DIR:-target}/debug/deltapilot"
fi
[[ -x "$DELTAPILOT_BIN" ]] || die "no deltapilot binary at $DELTAPILOT_BIN"

for f in examples/envoy-*.yaml; do
    header="$(sed -n '/^#/!q;p' "$f")"
    cmd="$(grep -m1 '^# \$ deltapilot bootstrap ' "$f" || true)"
    [[ -n "$cmd" ]] || die "$f: no '# \$ deltapilot bootstrap ...' line in its header"
    read -r -a args <<<"${cmd#'# $ deltapilot '}"
    body="$(env -u DELTAPILOT_XDS_ADDR -u DELTAPILOT_CONFIG "$DELTAPILOT_BIN" "${args[@]}")" ||
        die "$f: ${cmd#'# $ '} failed"
    printf '%s\n%s\n' "$header" "$body" >"$f.tmp"
    mv "$f.tmp" "$f"
    log "$f: ${cmd#'# $ '}"
done
