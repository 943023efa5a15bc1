package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tabuladb/tabula/storage/meta"
	"github.com/tabuladb/tabula/storage/tablet"
)

func (m *Master) registerMetrics() {
	m.gcDeleted = prometheus.NewCounter(prometheus.CounterOpts{Name: "tabula_master_gc_deleted_files_total", Help: "SSTables deleted by garbage collection."})
	m.registry.MustRegister(m.gcDeleted)
	m.registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tabula_master_leading", Help: "1 while this master holds the master lock."}, func() float64 {
		if m.Leading() {
			return 1
		}
		return 0
	}))
}

func (m *Master) gcLoop(ctx context.Context) {
	t := time.NewTicker(m.cfg.GCInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !m.Leading() {
			continue
		}
		if _, err := m.CollectGarbage(ctx); err != nil && ctx.Err() == nil {
			m.log.Warn("garbage collection", "err", err)
		}
	}
}

// CollectGarbage deletes the SSTables under tables/ that no live tablet
// references (the paper's mark-and-sweep over METADATA) and returns their
// names. Live tablets are every tablet METADATA lists, every tablet a live
// server reports (a split child not yet committed), and, through the
// states, the children of split tablets; their states are read before the
// store is listed, so a file committed in between is either referenced or
// younger than the grace period, which also spares the outputs of
// compactions under way. Any error reading a state aborts the round:
// a state left out would lose its files.
func (m *Master) CollectGarbage(ctx context.Context) ([]string, error) {
	tablets, err := m.md.allTablets(ctx)
	if err != nil {
		return nil, err
	}
	ids := make([]string, 0, len(tablets))
	for _, t := range tablets {
		ids = append(ids, string(t.ID))
	}
	for _, s := range m.control.Observed().Live {
		for _, sv := range s.Serving {
			ids = append(ids, string(sv.ID))
		}
	}
	live, err := liveFiles(ctx, m.states, ids)
	if err != nil {
		return nil, err
	}
	deleted, err := tablet.CollectGarbage(ctx, m.cfg.Store, tablet.GCOptions{Prefix: meta.TableDirPrefix, Live: live, Grace: m.cfg.GCGrace})
	m.gcDeleted.Add(float64(len(deleted)))
	if len(deleted) > 0 {
		m.log.Info("garbage collected", "files", len(deleted))
		m.events.add(event{Kind: "gc", Detail: fmt.Sprintf("%d files deleted", len(deleted))})
	}
	return deleted, err
}

// liveFiles returns the files referenced by the states of tablets ids and
// of their split descendants. A tablet without a state (never loaded) has
// no files.
func liveFiles(ctx context.Context, states tablet.StateStore, ids []string) (map[string]bool, error) {
	live := make(map[string]bool)
	seen := make(map[string]bool)
	for len(ids) > 0 {
		id := ids[len(ids)-1]
		ids = ids[:len(ids)-1]
		if seen[id] {
			continue
		}
		seen[id] = true
		st, err := states.Load(ctx, id)
		if errors.Is(err, tablet.ErrStateNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("cluster: reading the state of tablet %s: %w", id, err)
		}
		ids = append(ids, st.SplitInto...)
		for _, f := range st.Files() {
			live[f] = true
		}
	}
	return live, nil
}
