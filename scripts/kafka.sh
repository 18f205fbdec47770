#!/usr/bin/env bash
# Starts/stops a single-node Apache Kafka (KRaft) broker for the test suite.
#
#   scripts/kafka.sh start PORT [LOGFILE]   # background broker on 127.0.0.1:PORT
#   scripts/kafka.sh stop                   # stop it (no-op if not running)
#   scripts/kafka.sh status                 # exit 0 and print pid/port if running
#   scripts/kafka.sh env                    # the secured listeners' exports (see below)
#
# One process is broker and controller at once (process.roles=broker,controller);
# the controller listens on another free loopback port. Every start formats a
# fresh store under $DELTAPILOT_RUN_DIR/kafka (default run dir
# ${TMPDIR:-/tmp}/deltapilot-run), so each start is an empty cluster; set a
# different DELTAPILOT_RUN_DIR to run two brokers.
#
# The jars are $DELTAPILOT_KAFKA_HOME/libs, else those scripts/install-test-deps.sh
# put in $DELTAPILOT_TOOLS/kafka-<version>/libs. Java is `java` on PATH (17+).
#
# Knobs: DELTAPILOT_KAFKA_START_TIMEOUT (seconds, default 90),
#        DELTAPILOT_KAFKA_HEAP (default "-Xms256m -Xmx512m"),
#        DELTAPILOT_KAFKA_LOG_LEVEL (slf4j-simple level, default warn),
#        DELTAPILOT_KAFKA_ADVERTISED_PORT (port Metadata tells clients, default
#          PORT; a test puts a TCP proxy there to cut the broker off),
#        DELTAPILOT_KAFKA_TLS=1 (also an SSL listener with client certificates
#          and a SASL_SSL listener with SCRAM and PLAIN, on free ports, with
#          certificates made at start; `env` prints DELTAPILOT_KAFKA_SSL_BROKERS,
#          DELTAPILOT_KAFKA_SASL_BROKERS and DELTAPILOT_KAFKA_TLS_DIR; see
#          scripts/kafka/tls.sh).
set -euo pipefail

LOG_TAG=kafka.sh
SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=scripts/lib.sh
. "$SCRIPT_DIR/lib.sh"
# shellcheck source=scripts/kafka/tls.sh
. "$SCRIPT_DIR/kafka/tls.sh"

STATE="$DELTAPILOT_RUN_DIR/kafka"
PIDFILE="$DELTAPILOT_RUN_DIR/kafka.pid"
PORTFILE="$DELTAPILOT_RUN_DIR/kafka.port"
LOGPATHFILE="$DELTAPILOT_RUN_DIR/kafka.logpath"
ENVFILE="$DELTAPILOT_RUN_DIR/kafka.env"
PROPS="$STATE/server.properties"
PROBE="$SCRIPT_DIR/kafka/KafkaProbe.java"

usage() {
    sed -n '2,7p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

resolve_kafka_home() {
    load_tools_env
    local h="${DELTAPILOT_KAFKA_HOME:-}"
    if [ -z "$h" ]; then
        # The newest installed version, if env.sh did not name one.
        h="$(find "$DELTAPILOT_TOOLS" -maxdepth 1 -type d -name 'kafka-*' 2>/dev/null | sort -V | tail -n 1)"
    fi
    # shellcheck disable=SC2015 # die exits, so this is a real if/else
    [ -n "$h" ] && compgen -G "$h/libs/kafka_2.13-*.jar" >/dev/null ||
        die "no Apache Kafka jars (DELTAPILOT_KAFKA_HOME='${DELTAPILOT_KAFKA_HOME:-}', $DELTAPILOT_TOOLS/kafka-*/libs); run scripts/install-test-deps.sh"
    command -v java >/dev/null 2>&1 || die "no java on PATH (Apache Kafka 4.x needs Java 17+)"
    printf '%s\n' "$h"
}

# is_our_kafka PID : alive AND a kafka.Kafka started with this run dir's
# server.properties (guards against pid reuse: never kill a stranger).
is_our_kafka() {
    local pid="$1"
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
    local cmd
    cmd="$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null)" || return 1
    [[ "$cmd" == *" kafka.Kafka $PROPS"* ]]
}

read_pid() { cat "$PIDFILE" 2>/dev/null || true; }

clear_state() { rm -f "$PIDFILE" "$PORTFILE" "$LOGPATHFILE" "$ENVFILE"; }

# kill_and_wait PID : TERM (a controlled shutdown), wait up to
# 30 s, then KILL, wait up to 10 s.
kill_and_wait() {
    local pid="$1"
    kill -TERM "$pid" 2>/dev/null || return 0
    for _ in $(seq 1 300); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.1
    done
    warn "kafka pid $pid ignored SIGTERM for 30 s; sending SIGKILL"
    kill -KILL "$pid" 2>/dev/null || return 0
    for _ in $(seq 1 100); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.1
    done
    die "kafka pid $pid still alive after SIGKILL"
}

log_tail() {
    local logfile="$1"
    echo "----- last 40 lines of $logfile -----" >&2
    tail -n 40 "$logfile" >&2 2>/dev/null || echo "(log unreadable)" >&2
    echo "-----" >&2
}

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# A KRaft cluster id: 16 random bytes, URL-safe base64 without padding (what
# `kafka-storage random-uuid` prints), without paying a JVM start for it. Like
# Kafka's own Uuid.randomUuid, never one that starts with '-': the storage
# tool's argument parser would take it for an option (one run in 64 failed so).
cluster_id() {
    python3 -c '
import base64, os
while True:
    cid = base64.urlsafe_b64encode(os.urandom(16)).decode().rstrip("=")
    if not cid.startswith("-"):
        print(cid)
        break
'
}

# write_props PORT CONTROLLER_PORT ADVERTISED_PORT [SSL_PORT SASL_SSL_PORT]
write_props() {
    local port="$1" cport="$2" adv="$3" sslport="${4:-}" saslport="${5:-}"
    local listeners="PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport"
    local advertised="PLAINTEXT://127.0.0.1:$adv"
    local map="PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"
    if [ -n "$sslport" ]; then
        listeners+=",SSL://127.0.0.1:$sslport,SASL_SSL://127.0.0.1:$saslport"
        advertised+=",SSL://127.0.0.1:$sslport,SASL_SSL://127.0.0.1:$saslport"
        map+=",SSL:SSL,SASL_SSL:SASL_SSL"
    fi
    cat >"$PROPS" <<EOF
# Generated by scripts/kafka.sh: a single-node KRaft broker for tests.
process.roles=broker,controller
node.id=1
listeners=$listeners
advertised.listeners=$advertised
listener.security.protocol.map=$map
inter.broker.listener.name=PLAINTEXT
controller.listener.names=CONTROLLER
controller.quorum.bootstrap.servers=127.0.0.1:$cport
log.dirs=$STATE/data

# One broker: every internal topic has one replica, and one partition where
# that makes the coordinators come up faster.
num.partitions=1
default.replication.factor=1
min.insync.replicas=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0

# Off: deltapilot creates its topic itself (with its partition count and
# cleanup.policy=compact) and its clients set allow.auto.create.topics=false.
# A broker that auto-creates would hide a client that touches a topic nobody
# created, with the broker's defaults (1 partition, delete policy).
auto.create.topics.enable=false

# Compaction on, and fast enough for a test to see: the cleaner looks every
# second (default 15 s). Only closed segments are cleaned, so a test that
# wants to watch compaction sets segment.ms (or segment.bytes) on its topic.
log.cleaner.enable=true
log.cleaner.backoff.ms=1000
log.cleaner.threads=1
# 16 MiB instead of 128 MiB of heap for the cleaner's dedupe map.
log.cleaner.dedupe.buffer.size=16777216
log.segment.delete.delay.ms=1000

# Two cores on the test machines: few threads.
num.network.threads=2
num.io.threads=2
num.recovery.threads.per.data.dir=1
background.threads=2
EOF
}

cmd_start() {
    local port="${1:-}" logfile="${2:-$DELTAPILOT_RUN_DIR/kafka.log}"
    # shellcheck disable=SC2015 # die exits, so this is a real if/else
    [[ "$port" =~ ^[0-9]+$ ]] && [ "$port" -ge 1 ] && [ "$port" -le 65535 ] ||
        die "start: PORT must be a number in 1..65535, got '${port}'"
    local adv="${DELTAPILOT_KAFKA_ADVERTISED_PORT:-$port}"
    local home
    home="$(resolve_kafka_home)"
    mkdir -p "$DELTAPILOT_RUN_DIR" "$(dirname "$logfile")"
    logfile="$(cd "$(dirname "$logfile")" && pwd)/$(basename "$logfile")"

    local old
    old="$(read_pid)"
    if [ -n "$old" ]; then
        if is_our_kafka "$old"; then
            die "start: kafka already running (pid $old, port $(cat "$PORTFILE" 2>/dev/null || echo '?')); run '$0 stop' first"
        fi
        log "start: removing stale pidfile (pid $old is gone)"
        clear_state
    fi
    if tcp_port_open "$port"; then
        die "start: 127.0.0.1:$port is already accepting connections (another process); pick another port"
    fi
    local cport
    cport="$(free_port)"
    [ "$cport" != "$port" ] || cport="$(free_port)"

    local sslport="" saslport="" scram=()
    if [ "${DELTAPILOT_KAFKA_TLS:-0}" = 1 ]; then
        sslport="$(free_port)"
        saslport="$(free_port)"
        # shellcheck disable=SC2015 # die exits, so this is a real if/else
        [ "$sslport" != "$saslport" ] && [ "$sslport" != "$port" ] && [ "$saslport" != "$port" ] &&
            [ "$sslport" != "$cport" ] && [ "$saslport" != "$cport" ] ||
            die "start: free_port handed out one port twice; try again"
    fi

    # A fresh store every start: an empty cluster, like Tansu's memory://.
    rm -rf "$STATE"
    mkdir -p "$STATE/data"
    write_props "$port" "$cport" "$adv" "$sslport" "$saslport"
    if [ -n "$sslport" ]; then
        tls_make_files "$STATE/tls"
        tls_props "$STATE/tls" "$sslport" "$saslport" >>"$PROPS"
        mapfile -t scram < <(tls_scram_args "$STATE/tls")
    fi

    local java_log_opts=(
        "-Dorg.slf4j.simpleLogger.defaultLogLevel=${DELTAPILOT_KAFKA_LOG_LEVEL:-warn}"
        -Dorg.slf4j.simpleLogger.showDateTime=true
        "-Dorg.slf4j.simpleLogger.dateTimeFormat=yyyy-MM-dd'T'HH:mm:ss.SSS"
        # The one line that says the broker is up, even at level warn.
        -Dorg.slf4j.simpleLogger.log.kafka.server.KafkaRaftServer=info
    )
    local cid
    cid="$(cluster_id)"
    printf '=== %s kafka.sh start: Apache Kafka (%s) on 127.0.0.1:%s, controller 127.0.0.1:%s, cluster %s ===\n' \
        "$(date -u +%FT%TZ)" "$home" "$port" "$cport" "$cid" >>"$logfile"
    # --standalone: this node is the whole (dynamic, KIP-853) controller quorum.
    local out
    out="$(timeout 120 java -Xmx256m "${java_log_opts[@]}" -cp "$home/libs/*" \
        kafka.tools.StorageTool format --config "$PROPS" --cluster-id "$cid" --standalone \
        "${scram[@]}" 2>&1)" || {
        printf '%s\n' "$out" >>"$logfile"
        log_tail "$logfile"
        die "start: kafka-storage format failed (see $logfile)"
    }
    printf '%s\n' "$out" >>"$logfile"

    # shellcheck disable=SC2206 # the heap knob is a list of JVM flags
    local heap=(${DELTAPILOT_KAFKA_HEAP:--Xms256m -Xmx512m})
    # exec'd by the subshell, so $! is the JVM's own pid.
    java "${heap[@]}" -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:+ExitOnOutOfMemoryError \
        -Djava.awt.headless=true "${java_log_opts[@]}" \
        -cp "$home/libs/*" kafka.Kafka "$PROPS" \
        </dev/null >>"$logfile" 2>&1 &
    local pid=$!
    echo "$pid" >"$PIDFILE"
    echo "$port" >"$PORTFILE"
    echo "$logfile" >"$LOGPATHFILE"

    # Ready = the broker answers a real Metadata round trip (DescribeCluster and
    # ListTopics through the Admin client). The probe is one JVM that retries
    # until its own deadline; we also watch for the broker exiting.
    local limit="${DELTAPILOT_KAFKA_START_TIMEOUT:-90}" deadline rc last="not probed"
    deadline=$((SECONDS + limit))
    while :; do
        if ! kill -0 "$pid" 2>/dev/null; then
            clear_state
            log_tail "$logfile"
            die "start: kafka exited during startup (see $logfile)"
        fi
        local left=$((deadline - SECONDS))
        if [ "$left" -le 0 ]; then
            kill_and_wait "$pid"
            clear_state
            log_tail "$logfile"
            die "start: kafka not ready on 127.0.0.1:$port within ${limit}s (last probe: $last)"
        fi
        if tcp_port_open "$port"; then
            rc=0
            out="$(timeout $((left + 10)) java -Xmx64m -XX:TieredStopAtLevel=1 \
                -Dorg.slf4j.simpleLogger.defaultLogLevel=error \
                -cp "$home/libs/*" "$PROBE" "127.0.0.1:$port" "$left" 2>&1)" || rc=$?
            if [ "$rc" -eq 0 ]; then
                if [ -n "$sslport" ]; then
                    tls_env_file "$STATE/tls" "$sslport" "$saslport" "$ENVFILE"
                    log "kafka SSL (client certificates) on 127.0.0.1:$sslport, SASL_SSL on 127.0.0.1:$saslport; exports in $ENVFILE"
                fi
                log "kafka ready on 127.0.0.1:$port (pid $pid, log $logfile, $out)"
                return 0
            fi
            last="probe exited $rc: $(printf '%s' "$out" | tail -n 3)"
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
    if is_our_kafka "$pid"; then
        kill_and_wait "$pid"
        log "stop: stopped kafka pid $pid"
    else
        log "stop: pid $pid from $PIDFILE is not a running kafka; clearing stale pidfile"
    fi
    clear_state
}

cmd_status() {
    local pid
    pid="$(read_pid)"
    if [ -n "$pid" ] && is_our_kafka "$pid"; then
        echo "running pid=$pid port=$(cat "$PORTFILE" 2>/dev/null) log=$(cat "$LOGPATHFILE" 2>/dev/null)"
        return 0
    fi
    echo "not running"
    return 1
}

cmd_env() {
    [ -f "$ENVFILE" ] || die "env: no $ENVFILE (start the broker with DELTAPILOT_KAFKA_TLS=1)"
    cat "$ENVFILE"
}

case "${1:-}" in
start) shift; cmd_start "$@" ;;
stop) cmd_stop ;;
status) cmd_status ;;
env) cmd_env ;;
*) usage ;;
esac
