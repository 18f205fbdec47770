# shellcheck shell=bash
# Shared helpers for scripts/install-test-deps.sh, scripts/tansu.sh and
# scripts/kafka.sh.
# Source it; it is not meant to be run. It only defines functions and a few
# variables, so sourcing it has no side effects.

# Where the downloaded test peers live. Never inside the repo: they are large
# binaries (Tansu ~40 MB, Envoy ~100 MB) and are per-machine, not per-checkout.
DELTAPILOT_TOOLS="${DELTAPILOT_TOOLS:-$HOME/.cache/deltapilot-tools}"

# Directory for pidfiles of the background peers started by tansu.sh and
# kafka.sh (and kafka.sh's broker store).
# Outside the repo so a fresh clone (CI) never sees a stale pidfile.
DELTAPILOT_RUN_DIR="${DELTAPILOT_RUN_DIR:-${TMPDIR:-/tmp}/deltapilot-run}"

# Name shown in front of every message; each script sets its own.
: "${LOG_TAG:=deltapilot}"

log() { printf '[%s] %s\n' "$LOG_TAG" "$*" >&2; }
warn() { printf '[%s] WARNING: %s\n' "$LOG_TAG" "$*" >&2; }
die() {
    printf '[%s] ERROR: %s\n' "$LOG_TAG" "$*" >&2
    exit 1
}

# Seconds since the epoch with milliseconds, for step timings.
now_s() { date +%s.%N; }
# elapsed START -> "12.3s"
elapsed() { awk -v s="$1" -v e="$(now_s)" 'BEGIN { printf "%.1fs", e - s }'; }

# Runs apt/dpkg commands as root; uses sudo only when we are not root already.
as_root() {
    if [ "$(id -u)" -eq 0 ]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1; then
        sudo "$@"
    else
        die "need root (or sudo) to run: $*"
    fi
}

# True when the Debian package is fully installed. `dpkg -s` alone exits 0 for
# packages in state "deinstall"/"config-files", so check the status field.
dpkg_installed() {
    dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q '^install ok installed$'
}

# ensure_apt_packages PKG... : installs only the missing ones. `apt-get update`
# runs only when something is missing, so a second run does no network I/O.
ensure_apt_packages() {
    local missing=() p
    for p in "$@"; do
        dpkg_installed "$p" || missing+=("$p")
    done
    if [ "${#missing[@]}" -eq 0 ]; then
        log "apt: all present ($*)"
        return 0
    fi
    log "apt: installing ${missing[*]}"
    # Bounded: a hung mirror must not hang CI for its whole 90 minutes.
    as_root env DEBIAN_FRONTEND=noninteractive timeout 600 apt-get update -qq ||
        die "apt-get update failed (or timed out after 600 s)"
    as_root env DEBIAN_FRONTEND=noninteractive timeout 1200 \
        apt-get install -y -qq --no-install-recommends "${missing[@]}" ||
        die "apt-get install ${missing[*]} failed (or timed out after 1200 s)"
    for p in "${missing[@]}"; do
        dpkg_installed "$p" || die "apt: $p still not installed after apt-get install"
    done
}

# sha256_of FILE -> hex digest on stdout.
sha256_of() { sha256sum "$1" | awk '{ print $1 }'; }

# tcp_port_open PORT : true when something accepts TCP connections on
# 127.0.0.1:PORT. Uses bash's /dev/tcp so no netcat is needed; bounded by
# `timeout` because a filtered port could otherwise block for minutes.
tcp_port_open() {
    # shellcheck disable=SC2016 # $1 is expanded by the inner bash, on purpose
    timeout 2 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1"' _ "$1" 2>/dev/null
}

# Loads $DELTAPILOT_TOOLS/env.sh (written by install-test-deps.sh) if present,
# without overriding variables the caller already exported.
load_tools_env() {
    local f="$DELTAPILOT_TOOLS/env.sh"
    [ -r "$f" ] || return 0
    local saved_tansu="${DELTAPILOT_TANSU:-}" saved_envoy="${DELTAPILOT_ENVOY:-}" \
        saved_grpc="${DELTAPILOT_GRPC_PYTHON:-}" saved_kafka="${DELTAPILOT_KAFKA_HOME:-}"
    # shellcheck disable=SC1090
    . "$f"
    [ -n "$saved_tansu" ] && DELTAPILOT_TANSU="$saved_tansu"
    [ -n "$saved_envoy" ] && DELTAPILOT_ENVOY="$saved_envoy"
    [ -n "$saved_grpc" ] && DELTAPILOT_GRPC_PYTHON="$saved_grpc"
    [ -n "$saved_kafka" ] && DELTAPILOT_KAFKA_HOME="$saved_kafka"
    return 0
}
