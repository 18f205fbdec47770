package main

// Watching the ServiceEntry directory: fsnotify (inotify on Linux) events,
// debounced, then only the named files are re-read; a full rescan runs at
// start, on an event-queue overflow and every `rescan` interval.
//
// Why fsnotify and not polling: a poll interval adds on average half of
// itself to every change's convergence, and that would be measured as the
// peer's latency. deltapilot's file adapter uses inotify (the notify crate)
// with a 100 ms quiet / 1 s maximum debounce and a 30 s rescan; the defaults
// here are the same, so both servers pay the same ingest delay.
//
// What it does NOT do: watch subdirectories or follow symlinked directories.

import (
	"context"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
)

// watcher holds each file's last good services.
type watcher struct {
	dir                   string
	debounce, maxDebounce time.Duration
	rescan                time.Duration
	files                 map[string][]service
	onChange              func([]service)
	verbose               bool
}

// load re-reads one file (by base name): gone means its services are
// removed; a parse error keeps its last good state.
func (w *watcher) load(name string) {
	path := filepath.Join(w.dir, name)
	if _, err := os.Stat(path); os.IsNotExist(err) {
		delete(w.files, name)
		return
	}
	svcs, err := parseFile(path)
	if err != nil {
		log.Printf("skipping %s (keeping its last good state): %v", name, err)
		return
	}
	w.files[name] = svcs
}

func (w *watcher) scanAll() error {
	entries, err := os.ReadDir(w.dir)
	if err != nil {
		return err
	}
	present := map[string]bool{}
	for _, e := range entries {
		if e.Type().IsRegular() && servedFile(e.Name()) {
			present[e.Name()] = true
			w.load(e.Name())
		}
	}
	for name := range w.files {
		if !present[name] {
			delete(w.files, name)
		}
	}
	return nil
}

// run scans, publishes, then follows changes until ctx ends. `ready` is
// called after the first publish.
func (w *watcher) run(ctx context.Context, ready func()) error {
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return err
	}
	defer fw.Close()
	if err := fw.Add(w.dir); err != nil {
		return err
	}
	if err := w.scanAll(); err != nil {
		return err
	}
	w.onChange(meshOf(w.files))
	ready()

	rescan := time.NewTicker(w.rescan)
	defer rescan.Stop()
	dirty := map[string]bool{}
	full := false
	var quiet, limit <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-fw.Events:
			if !ok {
				return nil
			}
			name := filepath.Base(ev.Name)
			if !servedFile(name) {
				continue
			}
			dirty[name] = true
			quiet = time.After(w.debounce)
			if limit == nil {
				limit = time.After(w.maxDebounce)
			}
			continue
		case err, ok := <-fw.Errors:
			if !ok {
				return nil
			}
			log.Printf("watch error, rescanning: %v", err)
			full = true
		case <-rescan.C:
			full = true
		case <-quiet:
		case <-limit:
		}
		start := time.Now()
		if full {
			if err := w.scanAll(); err != nil {
				log.Printf("rescan of %s failed: %v", w.dir, err)
			}
		} else {
			for name := range dirty {
				w.load(name)
			}
		}
		n := len(dirty)
		dirty, full, quiet, limit = map[string]bool{}, false, nil, nil
		w.onChange(meshOf(w.files))
		if w.verbose {
			log.Printf("applied %d changed files in %v", n, time.Since(start))
		}
	}
}
