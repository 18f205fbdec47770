#!/usr/bin/env bash
# Smoke check of the istiod peer with a real Envoy: pilot-discovery in
# file-config mode (the flags `deltapilot loadgen --peer istiod` uses, see
# load-tests/src/istiod.rs) on a directory with one ServiceEntry and one
# VirtualService, and an Envoy (delta ADS, an Istio-style sidecar node id)
# that must end up with the service's cluster, its two endpoints and the
# VirtualService's route timeout. Exits non-zero, saying what is missing,
# otherwise. Not part of the test command (istiod is built by hand).
#
# Needs: DELTAPILOT_ISTIOD_PEER (./build.sh), DELTAPILOT_ENVOY, curl.
set -euo pipefail

ISTIOD="${DELTAPILOT_ISTIOD_PEER:?build pilot-discovery with ./build.sh and export DELTAPILOT_ISTIOD_PEER}"
ENVOY="${DELTAPILOT_ENVOY:?set DELTAPILOT_ENVOY (scripts/install-test-deps.sh)}"
WORK="$(mktemp -d -t istiod-smoke-XXXXXX)"
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
XDS=$(port); HTTP=$(port); MON=$(port); CTRLZ=$(port); ADMIN=$(port)

mkdir -p "$WORK/mesh"
cat > "$WORK/mesh/svc-a.yaml" <<YAML
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: svc-a, namespace: ns-0}
spec:
  hosts: [svc-a.ns-0.svc.cluster.local]
  location: MESH_INTERNAL
  resolution: STATIC
  ports: [{number: 8080, name: http, protocol: HTTP}]
  endpoints: [{address: 10.1.0.1}, {address: 10.1.0.2}]
YAML
cat > "$WORK/mesh/vs-a.yaml" <<YAML
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: vs-a, namespace: ns-0}
spec:
  hosts: [svc-a.ns-0.svc.cluster.local]
  http: [{timeout: 3s, route: [{destination: {host: svc-a.ns-0.svc.cluster.local}}]}]
YAML
printf 'configSources:\n  - address: fs://%s/mesh\nenableAutoMtls: false\ndefaultConfig:\n  discoveryAddress: 127.0.0.1:%s\n' \
    "$WORK" "$XDS" > "$WORK/mesh.yaml"

(cd "$WORK" && POD_NAMESPACE=istio-system ENABLE_CA_SERVER=false PILOT_CERT_PROVIDER=none \
    PILOT_ENABLE_METADATA_EXCHANGE=false PILOT_ENABLE_ALPN_FILTER=false \
    exec "$ISTIOD" discovery --registries= --meshConfig="$WORK/mesh.yaml" \
    --networksConfig="$WORK/no-mesh-networks" --grpcAddr="127.0.0.1:$XDS" --secureGRPCAddr= \
    --httpAddr="127.0.0.1:$HTTP" --httpsAddr= --monitoringAddr="127.0.0.1:$MON" \
    --ctrlz_address=127.0.0.1 --ctrlz_port="$CTRLZ" --log_output_level=default:warn \
    > "$WORK/istiod.log" 2>&1) &
PIDS+=($!)

cat > "$WORK/envoy.yaml" <<YAML
node:
  id: sidecar~10.128.0.1~lg-proxy-1.lg-ns-1~lg-ns-1.svc.cluster.local
  cluster: lg-app-1.lg-ns-1
  metadata: {NAMESPACE: lg-ns-1, INSTANCE_IPS: 10.128.0.1, POD_NAME: lg-proxy-1}
dynamic_resources:
  ads_config:
    api_type: DELTA_GRPC
    transport_api_version: V3
    grpc_services: [{envoy_grpc: {cluster_name: xds}}]
  cds_config: {ads: {}, resource_api_version: V3}
  lds_config: {ads: {}, resource_api_version: V3}
static_resources:
  clusters:
    - name: xds
      type: STATIC
      connect_timeout: 1s
      typed_extension_protocol_options:
        envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
          "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
          explicit_http_config: {http2_protocol_options: {}}
      load_assignment:
        cluster_name: xds
        endpoints: [{lb_endpoints: [{endpoint: {address: {socket_address: {address: 127.0.0.1, port_value: $XDS}}}}]}]
admin: {address: {socket_address: {address: 127.0.0.1, port_value: $ADMIN}}}
YAML
"$ENVOY" -c "$WORK/envoy.yaml" --base-id "$ADMIN" -l warning > "$WORK/envoy.log" 2>&1 &
PIDS+=($!)

CLUSTER='outbound|8080||svc-a.ns-0.svc.cluster.local'
for _ in $(seq 1 120); do
    dump=$(curl -sf "127.0.0.1:$ADMIN/config_dump?include_eds" || true)
    eps=$(curl -sf "127.0.0.1:$ADMIN/clusters" | grep -c "^$CLUSTER::10\.1\.0\.[12]:8080::health_flags" || true)
    if grep -q "\"timeout\": \"3s\"" <<<"$dump" && [ "$eps" = 2 ]; then
        echo "istiod smoke: OK (Envoy has $CLUSTER with 2 endpoints and the VirtualService's 3s timeout)"
        exit 0
    fi
    sleep 0.5
done
echo "istiod smoke: FAILED: Envoy did not get $CLUSTER with 2 endpoints and the 3s route timeout within 60 s" >&2
echo "--- istiod.log (tail)" >&2; tail -30 "$WORK/istiod.log" >&2
echo "--- envoy.log (tail)" >&2; tail -30 "$WORK/envoy.log" >&2
exit 1
