package main

// The mesh as the ServiceEntry files describe it: the subset of Istio's
// networking.istio.io ServiceEntry that `deltapilot loadgen --spawn` writes
// (load-tests/src/mesh.rs, `Service::service_entry_yaml`) and deltapilot's file
// adapter maps: hosts, ports (number, name, protocol), STATIC resolution and
// inline endpoints with a `region/zone/subzone` locality.
//
// What it does NOT do: WorkloadEntry selectors, DNS resolution, targetPort,
// endpoint weights or labels beyond reading them; nothing the load generator
// writes needs them.

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"
)

// serviceEntry is the part of a ServiceEntry document that is read.
type serviceEntry struct {
	Kind     string `yaml:"kind"`
	Metadata struct {
		Name      string `yaml:"name"`
		Namespace string `yaml:"namespace"`
	} `yaml:"metadata"`
	Spec struct {
		Hosts      []string `yaml:"hosts"`
		Resolution string   `yaml:"resolution"`
		Ports      []struct {
			Number   uint32 `yaml:"number"`
			Name     string `yaml:"name"`
			Protocol string `yaml:"protocol"`
		} `yaml:"ports"`
		Endpoints []struct {
			Address  string `yaml:"address"`
			Locality string `yaml:"locality"`
			Weight   uint32 `yaml:"weight"`
		} `yaml:"endpoints"`
	} `yaml:"spec"`
}

// port is one service port.
type port struct {
	number uint32
	// http: an HTTP-like protocol (HTTP, HTTP2, GRPC), served through the
	// port's HTTP connection manager and route configuration.
	http bool
}

// locality is an endpoint's `region/zone/subzone`.
type locality struct{ region, zone, subzone string }

func (l locality) less(o locality) bool {
	if l.region != o.region {
		return l.region < o.region
	}
	if l.zone != o.zone {
		return l.zone < o.zone
	}
	return l.subzone < o.subzone
}

// endpoint is one workload address of a service.
type endpoint struct {
	addr     netip.Addr
	locality locality
	weight   uint32
}

// service is one ServiceEntry host.
type service struct {
	host      string
	ports     []port
	endpoints []endpoint
}

// parseFile reads the services of one ServiceEntry file. Documents of other
// kinds are skipped; a malformed document fails the file, which then keeps
// its last good state (see watcher).
func parseFile(path string) ([]service, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var out []service
	for {
		var se serviceEntry
		err := dec.Decode(&se)
		if err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if se.Kind != "ServiceEntry" {
			continue
		}
		if r := strings.ToUpper(se.Spec.Resolution); r != "STATIC" {
			return nil, fmt.Errorf("%s: resolution %q: only STATIC is served", path, se.Spec.Resolution)
		}
		var ports []port
		for _, p := range se.Spec.Ports {
			proto := strings.ToUpper(p.Protocol)
			if proto == "" {
				proto = strings.ToUpper(strings.SplitN(p.Name, "-", 2)[0])
			}
			ports = append(ports, port{
				number: p.Number,
				http:   proto == "HTTP" || proto == "HTTP2" || proto == "GRPC",
			})
		}
		var eps []endpoint
		for _, e := range se.Spec.Endpoints {
			a, err := netip.ParseAddr(e.Address)
			if err != nil {
				return nil, fmt.Errorf("%s: endpoint %q: %w", path, e.Address, err)
			}
			parts := strings.SplitN(e.Locality, "/", 3)
			for len(parts) < 3 {
				parts = append(parts, "")
			}
			eps = append(eps, endpoint{
				addr:     a,
				locality: locality{parts[0], parts[1], parts[2]},
				weight:   e.Weight,
			})
		}
		for _, h := range se.Spec.Hosts {
			out = append(out, service{host: strings.ToLower(h), ports: ports, endpoints: eps})
		}
	}
	return out, nil
}

// servedFile says whether a directory entry is a mesh file: `*.yaml` or
// `*.yml`, not hidden (the load generator writes hidden temporary files and
// renames them into place).
func servedFile(name string) bool {
	if strings.HasPrefix(name, ".") {
		return false
	}
	ext := filepath.Ext(name)
	return ext == ".yaml" || ext == ".yml"
}

// meshOf flattens the per-file services into one host-sorted list; a host
// declared in several files is taken from the first file by name.
func meshOf(files map[string][]service) []service {
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	seen := map[string]bool{}
	var out []service
	for _, n := range names {
		for _, s := range files[n] {
			if !seen[s.host] {
				seen[s.host] = true
				out = append(out, s)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].host < out[j].host })
	return out
}
