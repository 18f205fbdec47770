// Command dp-gcp-peer serves the ServiceEntry directory that `deltapilot
// loadgen --spawn` writes as CDS/EDS/LDS/RDS over ADS (delta and SotW),
// through go-control-plane's own server and cache, so the load generator can
// run the same scenario against deltapilot and against it, side by side.
//
// Files: mesh.go (reading ServiceEntries), resources.go (the xDS resources,
// shaped like deltapilot's), publish.go (the SnapshotCache and LinearCache
// strategies), watch.go (following the directory).
//
// What it does NOT do: anything deltapilot does beyond what the simulated
// Envoys check (no event log, no proxyless gRPC listeners, no traffic rules,
// no admin or metrics endpoint: the load generator reads CPU and RSS from
// /proc).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
)

// drainTimeout bounds the graceful stop after SIGTERM: ADS streams never end
// on their own, so GracefulStop waits only for the cancelled streams to
// unwind before the server is stopped hard.
const drainTimeout = 5 * time.Second

func main() {
	addr := flag.String("addr", "127.0.0.1:18000", "xDS listen address (loopback only)")
	dir := flag.String("watch", "", "directory of ServiceEntry YAML files (required)")
	cacheKind := flag.String("cache", "linear", "go-control-plane cache: linear (one LinearCache per type) or snapshot (SnapshotCache, per-node snapshots)")
	debounce := flag.Duration("debounce", 100*time.Millisecond, "quiet time after a file event before applying it")
	maxDebounce := flag.Duration("max-debounce", time.Second, "longest a burst of events is held back")
	rescan := flag.Duration("rescan", 30*time.Second, "full rescan interval")
	verbose := flag.Bool("v", false, "log each applied change")
	flag.Parse()
	if err := run(*addr, *dir, *cacheKind, *debounce, *maxDebounce, *rescan, *verbose); err != nil {
		fmt.Fprintln(os.Stderr, "dp-gcp-peer:", err)
		os.Exit(1)
	}
}

func run(addr, dir, cacheKind string, debounce, maxDebounce, rescan time.Duration, verbose bool) error {
	if dir == "" {
		return errors.New("--watch DIR is required")
	}
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return fmt.Errorf("--watch %s: not a directory", dir)
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--addr %s: %w", addr, err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("--addr %s: only loopback addresses are served", addr)
	}
	if debounce <= 0 || maxDebounce < debounce || rescan <= 0 {
		return errors.New("need 0 < --debounce <= --max-debounce and --rescan > 0")
	}
	var pub publisher
	switch cacheKind {
	case "linear":
		pub = newLinearPublisher()
	case "snapshot":
		pub = newSnapshotPublisher()
	default:
		return fmt.Errorf("--cache %q: linear or snapshot", cacheKind)
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	var d differ
	var pubErr error
	w := &watcher{
		dir: dir, debounce: debounce, maxDebounce: maxDebounce, rescan: rescan, verbose: verbose,
		files: map[string][]service{},
		onChange: func(mesh []service) {
			set := build(mesh)
			changed, removed, differs, err := d.diff(set)
			if err == nil && differs {
				err = pub.publish(set, changed, removed)
			}
			if err != nil {
				log.Printf("publish failed: %v", err)
				pubErr = err
			}
		},
	}
	ready := make(chan struct{})
	var wg sync.WaitGroup
	var watchErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		watchErr = w.run(ctx, func() { close(ready) })
		if watchErr != nil {
			stop()
		}
	}()
	select {
	case <-ready:
	case <-ctx.Done():
		wg.Wait()
		return watchErr
	}
	if pubErr != nil {
		return pubErr
	}

	srv := serverv3.NewServer(ctx, pub.cache(), pub.callbacks())
	gs := grpc.NewServer(
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
	)
	discoverygrpc.RegisterAggregatedDiscoveryServiceServer(gs, srv)
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		stop()
		wg.Wait()
		return err
	}
	log.Printf("serving %s on %s (cache: %s)", dir, lis.Addr(), cacheKind)
	served := make(chan error, 1)
	go func() { served <- gs.Serve(lis) }()
	select {
	case err := <-served:
		stop()
		wg.Wait()
		return err
	case <-ctx.Done():
	}
	done := make(chan struct{})
	go func() { gs.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-time.After(drainTimeout):
		gs.Stop()
	}
	wg.Wait()
	log.Printf("stopped")
	return watchErr
}
