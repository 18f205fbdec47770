package main

// Publishing a resource set through one of go-control-plane's caches, the way
// their users do:
//
//   - snapshot: one SnapshotCache with per-node snapshots (IDHash, the
//     library's default). Every change builds one immutable Snapshot of all
//     four types, and SetSnapshot hands it to every connected node; a node
//     gets the current snapshot when its first request arrives (a stream
//     callback) and loses it when its last stream closes. Each type's version
//     is a counter bumped only when that type changed, so a SotW stream is not
//     re-sent types that did not change.
//   - linear: one LinearCache per type behind a MuxCache. Every change
//     updates only the resources whose bytes changed; all nodes share them.
//
// Both diff the new set against the last published one by deterministic
// bytes, so a rescan that changes nothing publishes nothing.
//
// What it does NOT do: per-node views; every simulated proxy is a sidecar
// that sees the same resources.

import (
	"bytes"
	"context"
	"fmt"
	"log"
	"sync"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"google.golang.org/protobuf/proto"
)

// publisher takes each new resource set and serves it.
type publisher interface {
	// cache is what the xDS server reads.
	cache() cachev3.Cache
	// callbacks are the server callbacks the publisher needs (may be nil).
	callbacks() serverv3.Callbacks
	// publish serves `set`, given what changed since the last call.
	publish(set resourceSet, changed map[string][]string, removed map[string][]string) error
}

var marshal = proto.MarshalOptions{Deterministic: true}

// differ remembers the bytes of the last published set.
type differ struct {
	last map[string]map[string][]byte
}

// diff returns, per type, the names added or changed and the names removed,
// and whether anything differs at all.
func (d *differ) diff(set resourceSet) (changed, removed map[string][]string, differs bool, err error) {
	next := map[string]map[string][]byte{}
	changed, removed = map[string][]string{}, map[string][]string{}
	for _, t := range typeURLs {
		next[t] = map[string][]byte{}
		for name, r := range set[t] {
			b, err := marshal.Marshal(r)
			if err != nil {
				return nil, nil, false, fmt.Errorf("encoding %s %s: %w", t, name, err)
			}
			next[t][name] = b
			if old, ok := d.last[t][name]; !ok || !bytes.Equal(old, b) {
				changed[t] = append(changed[t], name)
				differs = true
			}
		}
		for name := range d.last[t] {
			if _, ok := next[t][name]; !ok {
				removed[t] = append(removed[t], name)
				differs = true
			}
		}
	}
	d.last = next
	return changed, removed, differs, nil
}

// snapshotPublisher is the SnapshotCache strategy.
type snapshotPublisher struct {
	c cachev3.SnapshotCache

	mu       sync.Mutex
	current  *cachev3.Snapshot
	versions map[string]uint64
	// streams counts each node's open streams.
	streams map[string]int
	// nodeOf maps a stream to its node, learnt from its first request.
	nodeOf map[streamKey]string
}

func newSnapshotPublisher() *snapshotPublisher {
	return &snapshotPublisher{
		c:        cachev3.NewSnapshotCache(true, cachev3.IDHash{}, nil),
		versions: map[string]uint64{},
		streams:  map[string]int{},
		nodeOf:   map[streamKey]string{},
	}
}

func (p *snapshotPublisher) cache() cachev3.Cache { return p.c }

// streamKey names a stream: the SotW and delta servers number their streams
// independently.
type streamKey struct {
	delta bool
	id    int64
}

// seen gives a node the current snapshot on its stream's first request.
func (p *snapshotPublisher) seen(stream streamKey, node *corev3.Node) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.nodeOf[stream]; ok || node == nil {
		return
	}
	id := node.GetId()
	p.nodeOf[stream] = id
	p.streams[id]++
	if p.streams[id] == 1 && p.current != nil {
		if err := p.c.SetSnapshot(context.Background(), id, p.current); err != nil {
			log.Printf("snapshot for %s: %v", id, err)
		}
	}
}

func (p *snapshotPublisher) closed(stream streamKey) {
	p.mu.Lock()
	defer p.mu.Unlock()
	id, ok := p.nodeOf[stream]
	if !ok {
		return
	}
	delete(p.nodeOf, stream)
	p.streams[id]--
	if p.streams[id] <= 0 {
		delete(p.streams, id)
		p.c.ClearSnapshot(id)
	}
}

func (p *snapshotPublisher) callbacks() serverv3.Callbacks {
	return serverv3.CallbackFuncs{
		StreamRequestFunc: func(id int64, r *discovery.DiscoveryRequest) error {
			p.seen(streamKey{false, id}, r.GetNode())
			return nil
		},
		StreamDeltaRequestFunc: func(id int64, r *discovery.DeltaDiscoveryRequest) error {
			p.seen(streamKey{true, id}, r.GetNode())
			return nil
		},
		StreamClosedFunc:      func(id int64, _ *corev3.Node) { p.closed(streamKey{false, id}) },
		DeltaStreamClosedFunc: func(id int64, _ *corev3.Node) { p.closed(streamKey{true, id}) },
	}
}

func (p *snapshotPublisher) publish(set resourceSet, changed, removed map[string][]string) error {
	snap := &cachev3.Snapshot{}
	for _, t := range typeURLs {
		if len(changed[t]) > 0 || len(removed[t]) > 0 {
			p.versions[t]++
		}
		items := make([]types.Resource, 0, len(set[t]))
		for _, r := range set[t] {
			items = append(items, r)
		}
		snap.Resources[cachev3.GetResponseType(t)] = cachev3.NewResources(fmt.Sprint(p.versions[t]), items)
	}
	if err := snap.Consistent(); err != nil {
		return fmt.Errorf("inconsistent snapshot: %w", err)
	}
	// Hash once here, not under the cache's lock for the first delta node.
	if err := snap.ConstructVersionMap(); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.current = snap
	for id := range p.streams {
		if err := p.c.SetSnapshot(context.Background(), id, snap); err != nil {
			return fmt.Errorf("snapshot for %s: %w", id, err)
		}
	}
	return nil
}

// linearPublisher is the LinearCache strategy.
type linearPublisher struct {
	caches map[string]*cachev3.LinearCache
	mux    *cachev3.MuxCache
}

func newLinearPublisher() *linearPublisher {
	p := &linearPublisher{caches: map[string]*cachev3.LinearCache{}}
	all := map[string]cachev3.Cache{}
	for _, t := range typeURLs {
		c := cachev3.NewLinearCache(t)
		p.caches[t] = c
		all[t] = c
	}
	p.mux = &cachev3.MuxCache{
		Classify:      func(r *cachev3.Request) string { return r.GetTypeUrl() },
		ClassifyDelta: func(r *cachev3.DeltaRequest) string { return r.GetTypeUrl() },
		Caches:        all,
	}
	return p
}

func (p *linearPublisher) cache() cachev3.Cache          { return p.mux }
func (p *linearPublisher) callbacks() serverv3.Callbacks { return nil }

func (p *linearPublisher) publish(set resourceSet, changed, removed map[string][]string) error {
	for _, t := range typeURLs {
		if len(changed[t]) == 0 && len(removed[t]) == 0 {
			continue
		}
		up := make(map[string]types.Resource, len(changed[t]))
		for _, n := range changed[t] {
			up[n] = set[t][n]
		}
		if err := p.caches[t].UpdateResources(up, removed[t]); err != nil {
			return fmt.Errorf("updating %s: %w", t, err)
		}
	}
	return nil
}
