#!/usr/bin/env bash
# Starts/stops a Tansu (Kafka-protocol) broker for the test suite.
#
#   scripts/tansu.sh start PORT [LOGFILE]   # background broker on 127.0.0.1:PORT
#   scripts/tansu.sh stop                   # stop it (no-op if not running)
#   scripts/tansu.sh status                 # exit 0 and print pid/port if running
#
# Storage is memory://tansu/, so every start is an empty cluster and nothing
# touches the disk except the log. One broker per $DELTAPILOT_RUN_DIR (default
# ${TMPDIR:-/tmp}/deltapilot-run): set a different DELTAPILOT_RUN_DIR to run two.
#
# The binary is $DELTAPILOT_TANSU, else the one scripts/install-test-deps.sh
# put in $DELTAPILOT_TOOLS/bin, else `tansu` on PATH.
#
# Knobs: DELTAPILOT_TANSU_START_TIMEOUT (seconds, default 60),
#        DELTAPILOT_TANSU_RUST_LOG (Tansu's RUST_LOG, default warn),
#        DELTAPILOT_TANSU_ADVERTISED_PORT (port Metadata tells clients, default
#        PORT; a test puts a TCP proxy there to cut the broker off).
set -euo pipefail

LOG_TAG=tansu.sh
SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=scripts/lib.sh
. "$SCRIPT_DIR/lib.sh"

PIDFILE="$DELTAPILOT_RUN_DIR/tansu.pid"
PORTFILE="$DELTAPILOT_RUN_DIR/tansu.port"
LOGPATHFILE="$DELTAPILOT_RUN_DIR/tansu.logpath"

usage() {
    sed -n '2,6p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

resolve_tansu() {
    load_tools_env
    local t="${DELTAPILOT_TANSU:-}"
    if [ -z "$t" ]; then
        if [ -x "$DELTAPILOT_TOOLS/bin/tansu" ]; then
            t="$DELTAPILOT_TOOLS/bin/tansu"
        else
            t="$(command -v tansu || true)"
        fi
    fi
    # shellcheck disable=SC2015 # die exits, so this is a real if/else
    [ -n "$t" ] && [ -x "$t" ] ||
        die "no tansu binary (DELTAPILOT_TANSU='${DELTAPILOT_TANSU:-}', $DELTAPILOT_TOOLS/bin/tansu, PATH); run scripts/install-test-deps.sh"
    printf '%s\n' "$t"
}

# is_our_tansu PID : the pid is alive AND is a broker we started (its command
# line has our loopback --listener-url; matching on the binary's name would
# miss a DELTAPILOT_TANSU not called "tansu"). The second check guards against
# pid reuse: a stale pidfile must never make us kill a stranger.
is_our_tansu() {
    local pid="$1"
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
    # No `| grep -q` here: under pipefail an early-exiting grep can make the
    # pipeline fail with SIGPIPE and turn a real match into "not ours".
    local cmd
    cmd="$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null)" || return 1
    [[ "$cmd" == *" broker --listener-url tcp://127.0.0.1:"* ]]
}

read_pid() { cat "$PIDFILE" 2>/dev/null || true; }

clear_state() { rm -f "$PIDFILE" "$PORTFILE" "$LOGPATHFILE"; }

# kill_and_wait PID : TERM, wait up to 10 s, then KILL, wait up to 5 s.
# (Tansu 0.6 exits on TERM in ~1.3 s here.)
kill_and_wait() {
    local pid="$1"
    kill -TERM "$pid" 2>/dev/null || return 0
    for _ in $(seq 1 100); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.1
    done
    warn "tansu pid $pid ignored SIGTERM for 10 s; sending SIGKILL"
    kill -KILL "$pid" 2>/dev/null || return 0
    for _ in $(seq 1 50); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.1
    done
    die "tansu pid $pid still alive after SIGKILL"
}

log_tail() {
    local logfile="$1"
    echo "----- last 40 lines of $logfile -----" >&2
    tail -n 40 "$logfile" >&2 2>/dev/null || echo "(log unreadable)" >&2
    echo "-----" >&2
}

cmd_start() {
    local port="${1:-}" logfile="${2:-$DELTAPILOT_RUN_DIR/tansu.log}"
    # shellcheck disable=SC2015 # die exits, so this is a real if/else
    [[ "$port" =~ ^[0-9]+$ ]] && [ "$port" -ge 1 ] && [ "$port" -le 65535 ] ||
        die "start: PORT must be a number in 1..65535, got '${port}'"
    local tansu
    tansu="$(resolve_tansu)"
    mkdir -p "$DELTAPILOT_RUN_DIR" "$(dirname "$logfile")"
    # Absolute log path, so the failure message and `status` point at it.
    logfile="$(cd "$(dirname "$logfile")" && pwd)/$(basename "$logfile")"

    local old
    old="$(read_pid)"
    if [ -n "$old" ]; then
        if is_our_tansu "$old"; then
            die "start: tansu already running (pid $old, port $(cat "$PORTFILE" 2>/dev/null || echo '?')); run '$0 stop' first"
        fi
        log "start: removing stale pidfile (pid $old is gone)"
        clear_state
    fi
    # If something already listens there, the readiness probe below would talk
    # to *it* and report success for a broker that never bound.
    if tcp_port_open "$port"; then
        die "start: 127.0.0.1:$port is already accepting connections (another process); pick another port"
    fi

    local url="tcp://127.0.0.1:$port"
    local adv_url="tcp://127.0.0.1:${DELTAPILOT_TANSU_ADVERTISED_PORT:-$port}"
    printf '=== %s tansu.sh start: %s broker on %s ===\n' "$(date -u +%FT%TZ)" "$tansu" "$url" >>"$logfile"
    # Flags confirmed against `tansu broker --help` of this build (tansu 0.6.0):
    #   --listener-url            where it binds; default is tcp://0.0.0.0:9092,
    #                             so always pass it to stay on loopback.
    #   --advertised-listener-url what Metadata tells clients; default is
    #                             tcp://localhost:9092, which would send clients
    #                             to the wrong port.
    #   --storage-engine          memory://tansu/ (also the default; explicit so
    #                             an environment STORAGE_ENGINE can't change it).
    # No env var is required (--cluster-id defaults to "tansu_cluster"), but
    # Tansu *reads* several, each overriding a default: CLUSTER_ID,
    # LISTENER_URL, ADVERTISED_LISTENER_URL, STORAGE_ENGINE, SCHEMA_REGISTRY and
    # OTEL_EXPORTER_OTLP_ENDPOINT. Drop them all so a stray one in the caller's
    # environment can't enable schema validation or an OTLP exporter.
    # RUST_LOG is pinned: a caller's RUST_LOG=debug (common when debugging cargo
    # tests) makes Tansu write ~3,500 lines per request; even info is ~2,900.
    # NO_COLOR: its tracing output otherwise puts ANSI escapes into the file.
    # env execs tansu, so $! is the broker's own pid.
    env -u CLUSTER_ID -u LISTENER_URL -u ADVERTISED_LISTENER_URL -u STORAGE_ENGINE \
        -u SCHEMA_REGISTRY -u OTEL_EXPORTER_OTLP_ENDPOINT \
        RUST_LOG="${DELTAPILOT_TANSU_RUST_LOG:-warn}" NO_COLOR=1 \
        "$tansu" broker \
        --listener-url "$url" \
        --advertised-listener-url "$adv_url" \
        --storage-engine memory://tansu/ \
        </dev/null >>"$logfile" 2>&1 &
    local pid=$!
    echo "$pid" >"$PIDFILE"
    echo "$port" >"$PORTFILE"
    echo "$logfile" >"$LOGPATHFILE"

    # Ready = port accepts AND a real Kafka round trip (Metadata via `topic
    # list`) works. Each probe is bounded: `tansu topic list` against a port
    # with no broker does not fail, it retries forever. Worst case total is
    # the deadline plus one 10 s probe.
    local limit="${DELTAPILOT_TANSU_START_TIMEOUT:-60}" deadline out rc
    local last="port 127.0.0.1:$port not accepting connections"
    deadline=$((SECONDS + limit))
    while :; do
        if ! kill -0 "$pid" 2>/dev/null; then
            clear_state
            log_tail "$logfile"
            die "start: tansu exited during startup (see $logfile)"
        fi
        if tcp_port_open "$port"; then
            rc=0
            out="$(timeout 10 "$tansu" topic list --broker "$url" 2>&1)" || rc=$?
            if [ "$rc" -eq 0 ]; then
                log "tansu ready on $url (pid $pid, log $logfile, topics: $out)"
                return 0
            fi
            if [ "$rc" -eq 124 ]; then
                last="'tansu topic list' got no answer within 10 s"
            else
                last="'tansu topic list' exited $rc: $(printf '%s' "$out" | tail -n 3)"
            fi
        fi
        if [ "$SECONDS" -ge "$deadline" ]; then
            kill_and_wait "$pid"
            clear_state
            log_tail "$logfile"
            die "start: tansu not ready on $url within ${limit}s (last probe: $last)"
        fi
        sleep 0.2
    done
}

cmd_stop() {
    local pid
    pid="$(read_pid)"
    if [ -z "$pid" ]; then
        log "stop: not running (no pidfile $PIDFILE)"
        return 0
    fi
    if is_our_tansu "$pid"; then
        kill_and_wait "$pid"
        log "stop: stopped tansu pid $pid"
    else
        log "stop: pid $pid from $PIDFILE is not a running tansu; clearing stale pidfile"
    fi
    clear_state
}

cmd_status() {
    local pid
    pid="$(read_pid)"
    if [ -n "$pid" ] && is_our_tansu "$pid"; then
        echo "running pid=$pid port=$(cat "$PORTFILE" 2>/dev/null) log=$(cat "$LOGPATHFILE" 2>/dev/null)"
        return 0
    fi
    echo "not running"
    return 1
}

case "${1:-}" in
start) shift; cmd_start "$@" ;;
stop) cmd_stop ;;
status) cmd_status ;;
*) usage ;;
esac
