package broker

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// syncer gives kfake's page-cache mode Kafka's default flush points: a
// segment is fsynced once a newer one exists in its partition (it was
// rolled and is never written again), and every file at shutdown. kfake
// names segments <base offset>.dat with an index <base offset>.idx in
// <data dir>/partitions/<topic>-<partition>/.
type syncer struct {
	dir      string
	interval time.Duration
	log      *slog.Logger

	mu     sync.Mutex
	synced map[string]bool // sealed files already fsynced
	stop   chan struct{}
	done   chan struct{}
}

func newSyncer(dir string, interval time.Duration, log *slog.Logger) *syncer {
	return &syncer{dir: dir, interval: interval, log: log, synced: map[string]bool{},
		stop: make(chan struct{}), done: make(chan struct{})}
}

func (s *syncer) run() {
	defer close(s.done)
	t := time.NewTicker(s.interval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		if _, err := s.syncSealed(); err != nil {
			s.log.Warn("embedded kafka: fsync of sealed segments failed; retrying", "err", err)
		}
	}
}

// syncSealed fsyncs every sealed segment (and its index) not synced yet and
// returns how many files it synced.
func (s *syncer) syncSealed() (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	parts, err := filepath.Glob(filepath.Join(s.dir, "partitions", "*"))
	if err != nil {
		return 0, err
	}
	n := 0
	var errs []error
	for _, p := range parts {
		ents, err := os.ReadDir(p)
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) { // a deleted topic
				errs = append(errs, err)
			}
			continue
		}
		var bases []int64
		for _, e := range ents {
			if b, ok := strings.CutSuffix(e.Name(), ".dat"); ok {
				if v, err := strconv.ParseInt(b, 10, 64); err == nil {
					bases = append(bases, v)
				}
			}
		}
		sort.Slice(bases, func(i, j int) bool { return bases[i] < bases[j] })
		dirty := false
		for _, base := range bases[:max(0, len(bases)-1)] { // all but the active segment
			for _, ext := range []string{".dat", ".idx"} {
				f := filepath.Join(p, strconv.FormatInt(base, 10)+ext)
				if s.synced[f] {
					continue
				}
				if err := fsyncPath(f); err != nil {
					if !errors.Is(err, fs.ErrNotExist) { // trimmed by retention meanwhile
						errs = append(errs, err)
					}
					continue
				}
				s.synced[f], dirty = true, true
				n++
			}
		}
		if dirty { // the sealed files' directory entries, and their successor's
			if err := fsyncPath(p); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return n, errors.Join(errs...)
}

// stopAndSyncAll stops the background loop and fsyncs every file and
// directory under the data dir (the cluster is closed: nothing writes).
func (s *syncer) stopAndSyncAll() error {
	close(s.stop)
	<-s.done
	var errs []error
	err := filepath.WalkDir(s.dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			errs = append(errs, err)
			return nil
		}
		if d.Type().IsRegular() || d.IsDir() {
			if err := fsyncPath(path); err != nil {
				errs = append(errs, err)
			}
		}
		return nil
	})
	if err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("broker: fsync data dir at shutdown: %w", err)
	}
	return nil
}

func fsyncPath(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", path, err)
	}
	return nil
}
