package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/client"
	"github.com/tabuladb/tabula/storage/coord"
	"github.com/tabuladb/tabula/storage/master/assign"
	"github.com/tabuladb/tabula/storage/meta"
	"github.com/tabuladb/tabula/storage/tablet"
)

// coordSource is the client's MetadataSource for processes that talk to
// the lock service (servers, masters): the root's location comes from
// coord's root key instead of a GetRoot call; METADATA tablets are read
// from their servers as any client reads them.
type coordSource struct {
	kv    coord.KV
	inner client.MetadataSource
}

func (s coordSource) Root(ctx context.Context) (meta.Location, error) {
	root, _, err := readRoot(ctx, s.kv)
	return root, err
}

func (s coordSource) ScanMetadata(ctx context.Context, tab meta.Location, from []byte, limit int) ([]meta.Location, error) {
	return s.inner.ScanMetadata(ctx, tab, from, limit)
}

// unassignedRoot is the root tablet's location before any server loaded it.
func unassignedRoot() meta.Location {
	return meta.Location{Table: meta.MetadataTable, End: meta.RootTabletEnd(), TabletID: meta.RootTabletID}
}

// readRoot returns the root tablet's location from coord's root key and the
// key's modify index; a missing key is the unassigned root with index 0.
func readRoot(ctx context.Context, kv coord.KV) (meta.Location, uint64, error) {
	e, err := kv.Get(ctx, coord.KeyRoot)
	if errors.Is(err, coord.ErrNotFound) {
		return unassignedRoot(), 0, nil
	}
	if err != nil {
		return meta.Location{}, 0, err
	}
	var l meta.Location
	if err := json.Unmarshal(e.Value, &l); err != nil {
		return meta.Location{}, 0, fmt.Errorf("cluster: corrupt %s key: %w", coord.KeyRoot, err)
	}
	return l, e.ModifyIndex, nil
}

// metadataScanTimeout bounds one read of a METADATA tablet's rows.
const metadataScanTimeout = 3 * time.Second

// metadataStore is the master's view of METADATA (master.Metadata): the
// root's location in the lock service, the other tablets' rows read and
// written through a client whose locator walks the hierarchy.
type metadataStore struct {
	kv  coord.KV
	cl  *client.Client
	now func() time.Time
	log *slog.Logger

	mu   sync.Mutex
	rows map[string]meta.Location // tablet ID → its row as last read
}

func newMetadataStore(kv coord.KV, cl *client.Client) *metadataStore {
	return &metadataStore{kv: kv, cl: cl, now: time.Now, rows: make(map[string]meta.Location)}
}

// Tablets implements master.Metadata. It creates what a new cluster lacks
// on the way: the root key, then (once the root tablet is served) the row
// of METADATA's second tablet. Only the ranges of assigned METADATA tablets
// are read, and a METADATA tablet that cannot be read (it is moving, its
// server died) leaves its rows out rather than failing the round: the
// planner must still be able to assign it, and it leaves alone whatever
// servers report that METADATA lacks. Garbage collection, which must see
// every tablet, uses allTablets.
func (m *metadataStore) Tablets(ctx context.Context) ([]assign.Tablet, error) {
	ts, _, err := m.read(ctx)
	return ts, err
}

// allTablets is Tablets that fails unless every METADATA tablet was read.
func (m *metadataStore) allTablets(ctx context.Context) ([]assign.Tablet, error) {
	ts, complete, err := m.read(ctx)
	if err == nil && !complete {
		err = errors.New("cluster: METADATA not wholly readable (a METADATA tablet is unassigned or moving)")
	}
	return ts, err
}

// read returns the tablets METADATA lists and whether every METADATA
// tablet could be read.
func (m *metadataStore) read(ctx context.Context) (_ []assign.Tablet, complete bool, _ error) {
	root, index, err := readRoot(ctx, m.kv)
	if err != nil {
		return nil, false, err
	}
	if index == 0 {
		b, _ := json.Marshal(root)
		if err := m.kv.CAS(ctx, coord.KeyRoot, b, 0); err != nil && !errors.Is(err, coord.ErrConflict) {
			return nil, false, err
		}
	}
	rows := map[string]meta.Location{meta.RootTabletID: root}
	out := []assign.Tablet{{ID: meta.RootTabletID, Table: meta.MetadataTable.String(), End: string(root.End), LastServer: assign.ServerID(root.Server), Kind: assign.Root}}
	defer func() {
		m.mu.Lock()
		m.rows = rows
		m.mu.Unlock()
	}()
	if root.Server == "" {
		return out, false, nil
	}
	metas, err := m.scan(ctx, nil, meta.RootTabletEnd())
	if err != nil {
		m.warn("reading the root tablet", err)
		return out, false, nil
	}
	if len(metas) == 0 {
		// A new cluster: METADATA's second tablet holds every user row.
		st := tablet.State{ID: meta.MetaTabletID, Start: meta.RootTabletEnd()}
		rm, err := meta.StateMutation(meta.MetadataTable, st, cell.ServerTimestamp)
		if err != nil {
			return nil, false, err
		}
		if err := m.cl.Apply(ctx, meta.MetadataTableName, rm); err != nil {
			return nil, false, fmt.Errorf("creating METADATA's first tablet row: %w", err)
		}
		metas = []meta.Location{{Table: meta.MetadataTable, Start: st.Start, TabletID: st.ID}}
	}
	complete = true
	for _, l := range metas {
		rows[l.TabletID] = l
		out = append(out, assignTablet(l, assign.Meta))
		if l.Server == "" {
			complete = false
			continue
		}
		start := bytes.Clone(l.Start)
		users, err := m.scan(ctx, start, l.End)
		if err != nil {
			m.warn("reading METADATA tablet "+l.TabletID, err)
			complete = false
			continue
		}
		for _, u := range users {
			rows[u.TabletID] = u
			out = append(out, assignTablet(u, assign.User))
		}
	}
	return out, complete, nil
}

// warn logs a METADATA tablet that could not be read.
func (m *metadataStore) warn(what string, err error) {
	if m.log != nil {
		m.log.Warn("METADATA read incomplete", "what", what, "err", err)
	}
}

func assignTablet(l meta.Location, k assign.Kind) assign.Tablet {
	return assign.Tablet{ID: assign.TabletID(l.TabletID), Table: l.Table.String(), Start: string(l.Start), End: string(l.End), LastServer: assign.ServerID(l.Server), Kind: k}
}

// scan reads the METADATA rows in [start, end) as locations.
func (m *metadataStore) scan(ctx context.Context, start, end []byte) ([]meta.Location, error) {
	// A METADATA tablet that is moving answers "not serving" until the
	// master itself reassigns it: fail soon rather than retry for the
	// whole round.
	ctx, cancel := context.WithTimeout(ctx, metadataScanTimeout)
	defer cancel()
	s := m.cl.Scan(ctx, meta.MetadataTableName, client.ScanOptions{Start: start, End: end, Families: []string{meta.FamilyLoc, meta.FamilyState}, MaxVersions: 1})
	defer s.Close()
	var out []meta.Location
	for s.Next() {
		l, err := meta.ParseLocation(s.Row())
		if err != nil {
			return nil, err
		}
		out = append(out, l)
	}
	return out, s.Err()
}

// SetLocation implements master.Metadata: the root's location goes to the
// lock service, every other tablet's to its METADATA row, with a load
// event in the row's log.
func (m *metadataStore) SetLocation(ctx context.Context, tabletID, server string, epoch uint64) error {
	m.mu.Lock()
	l, ok := m.rows[tabletID]
	m.mu.Unlock()
	if !ok {
		return fmt.Errorf("cluster: tablet %s is not in METADATA as last read", tabletID)
	}
	l.Server, l.Epoch = server, epoch
	if tabletID == meta.RootTabletID {
		b, err := json.Marshal(l)
		if err != nil {
			return err
		}
		return m.kv.Put(ctx, coord.KeyRoot, b)
	}
	return m.cl.Apply(ctx, meta.MetadataTableName, locationWithEvent(l, meta.EventLoad, "", m.now()))
}

// locationWithEvent is the mutation recording l's location and an event of
// kind in its row's log.
func locationWithEvent(l meta.Location, kind, detail string, now time.Time) cell.RowMutation {
	rm := meta.LocationMutation(l.Table, l.End, l.Server, l.Epoch, cell.ServerTimestamp)
	ev, err := meta.EventMutation(l.Table, l.End, meta.Event{Time: now.UnixMilli() * 1000, Kind: kind, Server: l.Server, Epoch: l.Epoch, Detail: detail})
	if err == nil {
		rm.Mutations = append(rm.Mutations, ev.Mutations...)
	}
	return rm
}

// tableRows returns the METADATA locations of table's tablets.
func (m *metadataStore) tableRows(ctx context.Context, table meta.TableID) ([]meta.Location, error) {
	start, end := meta.MetadataTableRange(table)
	return m.scan(ctx, start, end)
}
