#!/usr/bin/env bash
# Compares two revisions on one criterion benchmark by running both builds at
# the same time, one per core, and swapping the cores every round.
#
# Why: on a shared VM the same binary's figures move by up to 2x within an hour
# (other tenants' use of the shared cache and memory; see BENCHMARKS.md, "The
# machine's two phases"), so two builds measured one after the other can differ
# by more than the change being measured. Run side by side, both see the same
# phase. Each also competes with the other for the cache, so the absolute
# figures are lower than a lone run's: compare the two columns, not these
# figures with a lone run's.
#
# Usage: scripts/bench-pair.sh REV_A REV_B BENCH FILTER [ROUNDS]
#   scripts/bench-pair.sh ef44d27 HEAD fold fold_endpoint_upserts/fold/100000 6
# BENCH is a bench target of deltapilot-benches (fold, replay, xds, ...);
# FILTER picks one benchmark of it. Each round prints each build's criterion
# estimate (throughput when the benchmark reports one, else time).
#
# The two revisions are built in temporary git worktrees, in the folder
# bench-pair/ under CARGO_TARGET_DIR (default: a temporary one, which costs two
# full builds). Why a folder of its own: cargo names a workspace member's
# artifacts by its path relative to the workspace root, so a worktree and the
# main checkout share them, and a later build in the checkout would take the
# worktree's build as fresh when its own sources are older (seen in the tenth
# session of 2026-11-30: a bench built from the wrong revision).
#
# BENCH_PAIR_KEEP=DIR keeps each built bench binary in DIR, named by bench and
# commit, and a later run with the same DIR reuses it instead of building the
# revision again (a bench build takes minutes on the shared cores).
set -euo pipefail

if [ $# -lt 4 ]; then
    sed -n '2,/^set -euo/p' "$0" | sed '$d'
    exit 2
fi
rev_a=$1 rev_b=$2 bench=$3 filter=$4 rounds=${5:-6}

# The fold bench's memory report takes several seconds and is not compared here.
export DELTAPILOT_FOLD_SKIP_MEMORY=1

repo=$(git rev-parse --show-toplevel)
work=$(mktemp -d)
if [ -n "${CARGO_TARGET_DIR:-}" ]; then
    export CARGO_TARGET_DIR="$CARGO_TARGET_DIR/bench-pair"
else
    export CARGO_TARGET_DIR="$work/target"
fi
cleanup() {
    git -C "$repo" worktree remove --force "$work/a" >/dev/null 2>&1 || true
    git -C "$repo" worktree remove --force "$work/b" >/dev/null 2>&1 || true
    git -C "$repo" worktree prune
    rm -rf "$work"
}
trap cleanup EXIT

# Builds revision $1 into $work/bench-$2 (or takes it from BENCH_PAIR_KEEP).
keep=${BENCH_PAIR_KEEP:-}
build() {
    local rev=$1 side=$2 exe commit
    commit=$(git -C "$repo" rev-parse --short=12 "$rev^{commit}")
    if [ -n "$keep" ] && [ -x "$keep/$bench-$commit" ]; then
        cp "$keep/$bench-$commit" "$work/bench-$side"
        return
    fi
    git -C "$repo" worktree add --detach --quiet "$work/$side" "$rev"
    exe=$(cd "$work/$side" && cargo bench -p deltapilot-benches --bench "$bench" --no-run 2>&1 |
        sed -n 's/^ *Executable .*(\(.*\))$/\1/p' | tail -n 1)
    if [ -z "$exe" ]; then
        echo "bench-pair: building $bench at $rev failed" >&2
        exit 1
    fi
    cp "$exe" "$work/bench-$side"
    if [ -n "$keep" ]; then
        mkdir -p "$keep"
        cp "$exe" "$keep/$bench-$commit"
    fi
}
build "$rev_a" a
build "$rev_b" b

# Runs build $1 on core $2 and prints its estimate.
run() {
    local side=$1 core=$2
    (cd "$work" && taskset -c "$core" "$work/bench-$side" --bench "$filter" \
        --warm-up-time 1 --measurement-time 3 >"$work/out-$side" 2>&1) || true
    local line
    line=$(grep -E '^ +thrpt: ' "$work/out-$side" | head -n 1)
    [ -n "$line" ] || line=$(grep -E '^ *(\S+ +)?time: ' "$work/out-$side" | head -n 1)
    if [ -z "$line" ]; then
        echo "no estimate (is FILTER right?)"
        return
    fi
    # "[low mid high]": the middle value and its unit.
    echo "$line" | sed 's/.*\[//; s/\]//' | awk '{print $3, $4}'
}

echo "bench-pair: $bench $filter, A=$rev_a B=$rev_b, $rounds rounds"
for r in $(seq "$rounds"); do
    if [ $((r % 2)) -eq 1 ]; then core_a=0 core_b=1; else core_a=1 core_b=0; fi
    run a "$core_a" >"$work/est-a" &
    run b "$core_b" >"$work/est-b"
    wait
    echo "round $r: A $(cat "$work/est-a")   B $(cat "$work/est-b")"
done
