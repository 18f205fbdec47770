package main

// The xDS resources of the mesh, named and shaped as deltapilot's generator
// makes them for sidecars (engine/src/xds/generate/{common,cds,eds,lds,rds}.rs),
// so the simulated Envoys receive the same names and, field for field, the
// same messages:
//   - CDS: `outbound|<port>||<host>`, type EDS over ADS, round robin, 5 s
//     connect timeout, panic threshold 0 %;
//   - EDS: a ClusterLoadAssignment of the same name, endpoints grouped by
//     locality (sorted), each group and endpoint with a weight > 0, HEALTHY;
//   - LDS: `0.0.0.0_<port>` per served port: an HTTP connection manager with
//     RDS `<port>` over ADS and the router filter when any service on the
//     port is HTTP, else a tcp_proxy to the port's single TCP service;
//   - RDS: `<port>`, one virtual host `<host>:<port>` per HTTP service, with
//     Istio's short-name domains where they are unambiguous, and one route
//     `/` to its cluster with the timeout disabled.
//
// What it does NOT do: proxyless gRPC `api_listener`s (the simulated fleet is
// all sidecars), DNS clusters, HTTP/2 upstream options, traffic rules.

import (
	"fmt"
	"sort"
	"strings"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tcpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// typeURLs are the four types served, in the order they are published (a
// cluster exists before the listener or route that names it).
var typeURLs = []string{
	resourcev3.ClusterType,
	resourcev3.EndpointType,
	resourcev3.ListenerType,
	resourcev3.RouteType,
}

// resourceSet is every resource of one type URL by name.
type resourceSet map[string]map[string]types.Resource

func clusterName(port uint32, host string) string {
	return fmt.Sprintf("outbound|%d||%s", port, host)
}

func adsSource() *corev3.ConfigSource {
	return &corev3.ConfigSource{
		ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}},
		ResourceApiVersion:    corev3.ApiVersion_V3,
	}
}

func mustAny(m proto.Message) *anypb.Any {
	a, err := anypb.New(m)
	if err != nil {
		panic(err) // only for messages of this package's own making
	}
	return a
}

func buildCluster(name string) *clusterv3.Cluster {
	return &clusterv3.Cluster{
		Name:                 name,
		ConnectTimeout:       durationpb.New(5 * time.Second),
		LbPolicy:             clusterv3.Cluster_ROUND_ROBIN,
		CommonLbConfig:       &clusterv3.Cluster_CommonLbConfig{HealthyPanicThreshold: &typev3.Percent{Value: 0}},
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
		EdsClusterConfig:     &clusterv3.Cluster_EdsClusterConfig{EdsConfig: adsSource(), ServiceName: name},
	}
}

func buildAssignment(name string, port uint32, eps []endpoint) *endpointv3.ClusterLoadAssignment {
	sorted := append([]endpoint(nil), eps...)
	sort.SliceStable(sorted, func(i, j int) bool {
		a, b := sorted[i], sorted[j]
		if a.locality != b.locality {
			return a.locality.less(b.locality)
		}
		return a.addr.Less(b.addr)
	})
	cla := &endpointv3.ClusterLoadAssignment{ClusterName: name}
	var seen = map[string]bool{}
	for i := 0; i < len(sorted); {
		j := i
		group := &endpointv3.LocalityLbEndpoints{Locality: &corev3.Locality{
			Region: sorted[i].locality.region, Zone: sorted[i].locality.zone, SubZone: sorted[i].locality.subzone,
		}}
		var total uint32
		for ; j < len(sorted) && sorted[j].locality == sorted[i].locality; j++ {
			e := sorted[j]
			if seen[e.addr.String()] {
				continue // one endpoint per socket, as deltapilot (and gRPC) want
			}
			seen[e.addr.String()] = true
			w := max(e.weight, 1)
			total += w
			group.LbEndpoints = append(group.LbEndpoints, &endpointv3.LbEndpoint{
				HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
					Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
						Protocol:      corev3.SocketAddress_TCP,
						Address:       e.addr.String(),
						PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: port},
					}}},
				}},
				HealthStatus:        corev3.HealthStatus_HEALTHY,
				LoadBalancingWeight: wrapperspb.UInt32(w),
			})
		}
		group.LoadBalancingWeight = wrapperspb.UInt32(total)
		cla.Endpoints = append(cla.Endpoints, group)
		i = j
	}
	return cla
}

func listenerAt(port uint32, filter *listenerv3.Filter) *listenerv3.Listener {
	return &listenerv3.Listener{
		Name: fmt.Sprintf("0.0.0.0_%d", port),
		Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
			Protocol:      corev3.SocketAddress_TCP,
			Address:       "0.0.0.0",
			PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: port},
		}}},
		FilterChains:     []*listenerv3.FilterChain{{Filters: []*listenerv3.Filter{filter}}},
		TrafficDirection: corev3.TrafficDirection_OUTBOUND,
		BindToPort:       wrapperspb.Bool(false),
	}
}

func httpListener(port uint32) *listenerv3.Listener {
	hcm := &hcmv3.HttpConnectionManager{
		CodecType:  hcmv3.HttpConnectionManager_AUTO,
		StatPrefix: fmt.Sprintf("outbound_0.0.0.0_%d", port),
		RouteSpecifier: &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{
			ConfigSource:    adsSource(),
			RouteConfigName: fmt.Sprint(port),
		}},
		HttpFilters: []*hcmv3.HttpFilter{{
			Name:       "envoy.filters.http.router",
			ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(&routerv3.Router{})},
		}},
	}
	return listenerAt(port, &listenerv3.Filter{
		Name:       "envoy.filters.network.http_connection_manager",
		ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: mustAny(hcm)},
	})
}

func tcpListener(port uint32, cluster string) *listenerv3.Listener {
	tp := &tcpv3.TcpProxy{
		StatPrefix:       cluster,
		ClusterSpecifier: &tcpv3.TcpProxy_Cluster{Cluster: cluster},
	}
	return listenerAt(port, &listenerv3.Filter{
		Name:       "envoy.filters.network.tcp_proxy",
		ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: mustAny(tp)},
	})
}

// claim is one domain a host may have, with its rank: 0 its own name, 1 a
// namespaced short form of a Kubernetes-style name, 2 the bare short name.
type claim struct {
	domain string
	rank   int
}

func candidates(host string, port uint32) []claim {
	var out []claim
	push := func(d string, r int) {
		out = append(out, claim{d, r}, claim{fmt.Sprintf("%s:%d", d, port), r})
	}
	push(host, 0)
	labels := strings.Split(host, ".")
	k8s := len(labels) >= 4 && labels[2] == "svc" && !strings.Contains(host, "*")
	for _, l := range labels {
		k8s = k8s && l != ""
	}
	if k8s {
		for n := len(labels) - 1; n >= 2; n-- {
			push(strings.Join(labels[:n], "."), 1)
		}
		push(labels[0], 2)
	}
	return out
}

// routeConfig is route configuration `<port>`: a domain goes to the single
// host claiming it at the lowest rank, to nobody when several tie (Envoy
// refuses two virtual hosts with one domain).
func routeConfig(port uint32, hosts []string) *routev3.RouteConfiguration {
	type best struct{ rank, count int }
	all := make([][]claim, len(hosts))
	owners := map[string]best{}
	for i, h := range hosts {
		all[i] = candidates(h, port)
		for _, c := range all[i] {
			b, ok := owners[c.domain]
			switch {
			case !ok || c.rank < b.rank:
				owners[c.domain] = best{c.rank, 1}
			case c.rank == b.rank:
				owners[c.domain] = best{b.rank, b.count + 1}
			}
		}
	}
	rc := &routev3.RouteConfiguration{Name: fmt.Sprint(port)}
	for i, h := range hosts {
		var domains []string
		for _, c := range all[i] {
			if owners[c.domain] == (best{c.rank, 1}) {
				domains = append(domains, c.domain)
			}
		}
		rc.VirtualHosts = append(rc.VirtualHosts, &routev3.VirtualHost{
			Name:    fmt.Sprintf("%s:%d", h, port),
			Domains: domains,
			Routes: []*routev3.Route{{
				Name:  "default",
				Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
				Action: &routev3.Route_Route{Route: &routev3.RouteAction{
					ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: clusterName(port, h)},
					Timeout:          durationpb.New(0),
				}},
			}},
		})
	}
	return rc
}

// build makes every resource of `mesh` (host-sorted) from scratch.
func build(mesh []service) resourceSet {
	set := resourceSet{}
	for _, t := range typeURLs {
		set[t] = map[string]types.Resource{}
	}
	httpHosts := map[uint32][]string{}
	tcpHosts := map[uint32][]string{}
	for _, s := range mesh {
		for _, p := range s.ports {
			name := clusterName(p.number, s.host)
			set[resourcev3.ClusterType][name] = buildCluster(name)
			set[resourcev3.EndpointType][name] = buildAssignment(name, p.number, s.endpoints)
			if p.http {
				httpHosts[p.number] = append(httpHosts[p.number], s.host)
			} else {
				tcpHosts[p.number] = append(tcpHosts[p.number], s.host)
			}
		}
	}
	for p, hosts := range httpHosts {
		l := httpListener(p)
		set[resourcev3.ListenerType][l.Name] = l
		rc := routeConfig(p, hosts)
		set[resourcev3.RouteType][rc.Name] = rc
	}
	for p, hosts := range tcpHosts {
		if _, http := httpHosts[p]; http || len(hosts) != 1 {
			continue // HTTP wins a shared port; several TCP services cannot be told apart
		}
		l := tcpListener(p, clusterName(p, hosts[0]))
		set[resourcev3.ListenerType][l.Name] = l
	}
	return set
}
