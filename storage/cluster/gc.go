package cluster

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/coord"
	"github.com/tabuladb/tabula/storage/master"
	"github.com/tabuladb/tabula/storage/master/assign"
	"github.com/tabuladb/tabula/storage/meta"
	"github.com/tabuladb/tabula/storage/tablet"
)

func (m *Master) registerMetrics() {
	m.gcDeleted = prometheus.NewCounter(prometheus.CounterOpts{Name: "tabula_master_gc_deleted_files_total", Help: "SSTables deleted by garbage collection."})
	m.registry.MustRegister(m.gcDeleted)
	m.logs.deleted = prometheus.NewCounter(prometheus.CounterOpts{Name: "tabula_master_gc_deleted_logs_total", Help: "Commit logs of dead tablet servers (with their sorted copies) deleted by garbage collection."})
	m.registry.MustRegister(m.logs.deleted)
	m.registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tabula_master_leading", Help: "1 while this master holds the master lock."}, func() float64 {
		if m.Leading() {
			return 1
		}
		return 0
	}))
}

// RestoreAbandonedAfter is how long after its creation the garbage
// collector's rounds finish a table left Restoring: longer than a
// RestoreTable may run (master.PendingMarkerTTL/2), so that its creator is
// certainly gone; a new active master finishes them at once.
const RestoreAbandonedAfter = master.PendingMarkerTTL / 2

// CreationInProgressFor is how long after its creation a table without
// tablets (no METADATA row) is taken for one whose CreateTable is still
// writing its rows on some master, rather than for one whose deletion a
// crash cut short (master.AdminService.FinishDeletions): CreateTable
// writes the rows right after the catalog entry.
const CreationInProgressFor = time.Minute

// gcLoop, every GCInterval while this master leads, finishes abandoned
// restores and collects garbage.
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
		// A creation a standby master was carrying out when it died
		// leaves a Restoring entry no change of leadership repairs.
		abandoned := repairScope{minAge: RestoreAbandonedAfter, now: time.Now()}
		if _, err := repairTables(ctx, m.catalog(), m.md, m.states, abandoned, m.log); err != nil && ctx.Err() == nil {
			m.log.Warn("repairing abandoned restores", "err", err)
		}
		// A DeleteTable that a standby master was carrying out when it
		// died leaves a listed table without tablets.
		if _, err := m.admin.FinishDeletions(ctx, CreationInProgressFor); err != nil && ctx.Err() == nil {
			m.log.Warn("finishing interrupted table deletions", "err", err)
		}
		if _, _, err := m.collectGarbage(ctx); err != nil && ctx.Err() == nil {
			m.log.Warn("garbage collection", "err", err)
		}
	}
}

// collectGarbage is one GC round. It deletes the SSTables under tables/
// that no live tablet references (the paper's mark-and-sweep over
// METADATA): live tablets are every tablet METADATA lists, every tablet a
// live server reports (a split child not yet committed), and, through the
// states, the children of split tablets; their states are read before the
// store is listed, so a file committed in between is either referenced or
// younger than the grace period, which also spares the outputs of
// compactions under way. Any error reading a state aborts the round: a
// state left out would lose its files. It also deletes the commit logs of
// dead servers (m.logs, which tracks their ages across rounds). It returns
// the SSTables and the logs (logName of their servers) deleted. METADATA
// is read once for both; the log collector reads it after listing the logs
// and servers/, as it must.
func (m *Master) collectGarbage(ctx context.Context) (files, logNames []string, err error) {
	logs := m.logs
	var (
		tablets []assign.Tablet
		mdErr   error
		mdRead  bool
	)
	readMetadata := func(ctx context.Context) ([]assign.Tablet, error) {
		if !mdRead {
			mdRead = true
			tablets, mdErr = m.md.allTablets(ctx)
		}
		return tablets, mdErr
	}
	logNames, logErr := logs.collect(ctx, func(ctx context.Context) ([]string, error) {
		ts, err := readMetadata(ctx)
		return lastServers(ts), err
	})
	if len(logNames) > 0 {
		logs.deleted.Add(float64(len(logNames)))
		m.log.Info("garbage collected commit logs", "logs", logNames)
		for _, n := range logNames {
			m.events.add(event{Kind: "gc", Detail: "commit log " + n + " of a dead server deleted"})
		}
	}
	if _, err := readMetadata(ctx); err != nil {
		if logErr != nil && !errors.Is(logErr, err) {
			err = errors.Join(err, logErr)
		}
		return nil, logNames, err
	}
	ids := make([]string, 0, len(tablets))
	for _, t := range tablets {
		ids = append(ids, string(t.ID))
	}
	for _, s := range m.loop.Observed().Live {
		for _, sv := range s.Serving {
			ids = append(ids, string(sv.ID))
		}
	}
	files, err = collectFiles(ctx, m.cfg.Store, m.states, ids, m.cfg.GCGrace, time.Now())
	m.gcDeleted.Add(float64(len(files)))
	if len(files) > 0 {
		m.log.Info("garbage collected", "files", len(files))
		m.events.add(event{Kind: "gc", Detail: fmt.Sprintf("%d files deleted", len(files))})
	}
	return files, logNames, errors.Join(err, logErr)
}

// collectFiles deletes the SSTables under tables/ that the states of
// tablets ids and their split descendants do not reference and that are
// at least grace old at now (master.SweepFiles); it returns their names. An
// error reading a state deletes nothing.
func collectFiles(ctx context.Context, store blob.Store, states tablet.StateStore, ids []string, grace time.Duration, now time.Time) ([]string, error) {
	referenced, err := master.ReferencedFiles(ctx, states, ids)
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	return master.SweepFiles(ctx, store, meta.TableDirPrefix, referenced, grace, now)
}

// logName is the name of server's commit log under LogsPrefix (and of its
// sorted copy under SortedLogsPrefix): LogPrefix(server) is
// LogsPrefix+logName(server). Different servers may share a logName (an
// address with '_'), so the collector compares logNames, never server
// names recovered from them: a log is kept if any server it may belong to
// needs it.
func logName(server string) string { return strings.ReplaceAll(server, "/", "_") }

// lastServers returns the servers METADATA names as tablets' last owners.
func lastServers(tablets []assign.Tablet) []string {
	out := make([]string, 0, len(tablets))
	for _, t := range tablets {
		if t.LastServer != "" {
			out = append(out, string(t.LastServer))
		}
	}
	return out
}

// deadLogs is the commit-log collector's decision: of the logs in
// written (logName → when its newest object, in the log or its sorted
// copy, was written), those it may delete at now, sorted. A log stays
// while
//   - its server has a key under servers/ (present: the names of every
//     key, released ones included — a released key is a server the
//     master has not declared dead yet, which may still come back);
//   - METADATA names its server as some tablet's last server (last): the
//     tablet's writes after its redo point may be only in this log,
//     until a new owner has replayed and flushed them and the master has
//     recorded the new location;
//   - or its newest object is younger than grace.
//
// The caller must have listed the logs before servers/, and servers/
// before METADATA (see logGC.collect).
func deadLogs(written map[string]time.Time, present, last []string, now time.Time, grace time.Duration) []string {
	keep := make(map[string]bool, len(present)+len(last))
	for _, s := range present {
		keep[logName(s)] = true
	}
	for _, s := range last {
		keep[logName(s)] = true
	}
	var out []string
	for name, t := range written {
		if keep[name] || now.Sub(t) < grace {
			continue
		}
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

// logGC deletes the commit logs of dead tablet servers, with their sorted
// copies (deadLogs says which). Its state, kept across rounds, is when it
// first saw each log as it is now.
type logGC struct {
	store blob.Store
	// local, when set, holds commit logs kept as files
	// (ServerConfig.LogDir, opened as a blob.Local): the same layout
	// under LogsPrefix, collected by the same rule.
	local blob.Store
	kv    coord.KV
	grace time.Duration
	now   func() time.Time
	// deleted counts the logs deleted; the caller adds to it.
	deleted prometheus.Counter

	mu   sync.Mutex
	seen map[string]logSeen // logName → its objects when first seen so
}

// logSeen is a log's objects (a digest of their names and sizes) and when
// the collector first listed them so.
type logSeen struct {
	digest [sha256.Size]byte
	since  time.Time
}

func newLogGC(store blob.Store, kv coord.KV, grace time.Duration) *logGC {
	return &logGC{store: store, kv: kv, grace: grace, now: time.Now, seen: make(map[string]logSeen)}
}

// collect runs one round: it lists the objects under logs/ and
// sortedlogs/, then the keys under servers/, then asks last for the last
// servers METADATA names, and deletes every log (and sorted copy) that
// deadLogs picks. It returns the logNames deleted whole. Any error before
// the decision deletes nothing; an object that fails to delete leaves its
// log for a later round.
//
// The order makes a log listed here safe to judge by servers/ and
// METADATA read later:
//   - A tablet server locks its key under servers/ before it writes its
//     first log object (StartTabletServer takes the lock before it opens
//     the commit log, and opening a log in the object store writes
//     nothing: its first object is its first flush). So the server of
//     every log listed had its key before the listing, and a key absent
//     from the later listing of servers/ was deleted by the master, which
//     does so only once it holds the key's lock: the server is dead, and a
//     server's name, with its nonce, is never used again. Listing servers/
//     first would let a server that starts in between look dead.
//   - A server declared dead stays the LastServer of its tablets in
//     METADATA until each has been loaded elsewhere (replayed from its log
//     and flushed) and the master has recorded the new location. Reading
//     METADATA after servers/ therefore sees every tablet still needing
//     the log of a server found dead. Read before, METADATA could miss a
//     tablet given to a server afterwards, which then takes writes and
//     dies before servers/ is listed: its log would look unneeded.
//
// blob.Attrs carries no modification time, so a log's newest write is
// bounded by when the collector first listed its current objects: a log is
// deleted only once it has stayed unchanged for grace since then, which is
// never sooner than grace after its newest write (a later one only: after
// a master failover the new master waits a grace again).
func (g *logGC) collect(ctx context.Context, last func(context.Context) ([]string, error)) ([]string, error) {
	logs, err := listLogs(ctx, g.store)
	if err != nil {
		return nil, err
	}
	var local map[string][]blob.Attrs
	if g.local != nil {
		if local, err = listLogs(ctx, g.local); err != nil {
			return nil, err
		}
	}
	listed := g.now()
	all := make(map[string][]blob.Attrs, len(logs)+len(local))
	for _, m := range []map[string][]blob.Attrs{logs, local} {
		for name, objs := range m {
			all[name] = append(all[name], objs...)
		}
	}
	present, err := serverNames(ctx, g.kv)
	if err != nil {
		return nil, err
	}
	lasts, err := last(ctx)
	if err != nil {
		return nil, fmt.Errorf("cluster: reading METADATA for commit-log GC: %w", err)
	}
	dead := deadLogs(g.written(all, listed), present, lasts, g.now(), g.grace)
	var deleted []string
	var errs []error
	for _, name := range dead {
		err := deleteObjects(ctx, g.store, logs[name])
		if g.local != nil {
			err = errors.Join(err, deleteObjects(ctx, g.local, local[name]))
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("cluster: deleting the commit log %s: %w", name, err))
			continue
		}
		deleted = append(deleted, name)
	}
	g.mu.Lock()
	for _, name := range deleted {
		delete(g.seen, name)
	}
	g.mu.Unlock()
	return deleted, errors.Join(errs...)
}

// written returns, for each listed log, when the collector first saw its
// objects as listed at listed (an upper bound of when its newest object
// was written), and forgets the logs no longer listed.
func (g *logGC) written(logs map[string][]blob.Attrs, listed time.Time) map[string]time.Time {
	g.mu.Lock()
	defer g.mu.Unlock()
	seen := make(map[string]logSeen, len(logs))
	out := make(map[string]time.Time, len(logs))
	for name, objs := range logs {
		d := digest(objs)
		s, ok := g.seen[name]
		if !ok || s.digest != d {
			s = logSeen{digest: d, since: listed}
		}
		seen[name] = s
		out[name] = s.since
	}
	g.seen = seen
	return out
}

// digest sums the names and sizes of objs: any object added, removed or
// replaced by one of another size changes it.
func digest(objs []blob.Attrs) [sha256.Size]byte {
	h := sha256.New()
	var n [8]byte
	for _, o := range objs {
		h.Write([]byte(o.Name))
		h.Write([]byte{0}) // names hold no NUL (blob.ValidateName)
		binary.BigEndian.PutUint64(n[:], uint64(o.Size))
		h.Write(n[:])
	}
	var out [sha256.Size]byte
	h.Sum(out[:0])
	return out
}

// listLogs returns the objects under logs/ and sortedlogs/ by logName:
// the first path segment after the prefix (a log's objects are all under
// LogPrefix(server)+"/"). Objects directly under either prefix belong to
// no server's log and are left out, so never deleted.
func listLogs(ctx context.Context, store blob.Store) (map[string][]blob.Attrs, error) {
	out := make(map[string][]blob.Attrs)
	for _, prefix := range []string{LogsPrefix, SortedLogsPrefix} {
		attrs, err := store.List(ctx, prefix)
		if err != nil {
			return nil, fmt.Errorf("cluster: listing %s: %w", prefix, err)
		}
		for _, a := range attrs {
			name, _, ok := strings.Cut(strings.TrimPrefix(a.Name, prefix), "/")
			if !ok || name == "" {
				continue
			}
			out[name] = append(out[name], a)
		}
	}
	return out, nil
}

// serverNames returns the names of every key under servers/, whether a
// session holds it or not. A key whose name cannot be read is an error: its
// server's log could not be told apart from a dead one's.
func serverNames(ctx context.Context, kv coord.KV) ([]string, error) {
	ents, err := kv.List(ctx, coord.PrefixServers)
	if err != nil {
		return nil, fmt.Errorf("cluster: listing %s: %w", coord.PrefixServers, err)
	}
	out := make([]string, 0, len(ents))
	for _, e := range ents {
		id, ok := coord.ServerID(e.Key)
		if !ok {
			return nil, fmt.Errorf("cluster: unreadable server key %q", e.Key)
		}
		out = append(out, id)
	}
	return out, nil
}

// deleteObjects deletes objs; objects already gone are not errors.
func deleteObjects(ctx context.Context, store blob.Store, objs []blob.Attrs) error {
	var errs []error
	for _, o := range objs {
		if err := store.Delete(ctx, o.Name); err != nil && !blob.IsNotExist(err) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
