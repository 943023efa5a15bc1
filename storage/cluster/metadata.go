package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/client"
	"github.com/tabuladb/tabula/storage/coord"
	"github.com/tabuladb/tabula/storage/gateway"
	"github.com/tabuladb/tabula/storage/master/assign"
	"github.com/tabuladb/tabula/storage/meta"
	"github.com/tabuladb/tabula/storage/tablet"
	"github.com/tabuladb/tabula/storage/tabletdesc"
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

// metadataRoundReadTimeout bounds a round's read of a METADATA tablet
// (readTablet) at a server whose reads have not been failing. It is no
// longer than the master's List timeout (master.LoopOptions.ListTimeout,
// 2 s): the round's Lists and its METADATA reads go out together, and a
// paused server holding METADATA tablets held up the round that first
// found it silent by the read's 3 s, not the List's 2 (its death was
// declared a second later).
const metadataRoundReadTimeout = 2 * time.Second

// metadataSuspectTimeout bounds one read of a METADATA tablet at a server
// where the last one failed (metadataStore.suspects): long enough for a
// live server's answer, short enough not to hold up the round.
const metadataSuspectTimeout = 500 * time.Millisecond

// metadataProbeAfter is how long a METADATA read waits for an answer
// before checking whether its server's address refuses connections.
const metadataProbeAfter = 200 * time.Millisecond

// errMetadataServerGone: a METADATA read failed because nothing listens at
// its server's address.
var errMetadataServerGone = errors.New("cluster: nothing listens at the METADATA tablet's server")

// errMetadataServerDead: a METADATA tablet was not read because the
// master declared its server dead.
var errMetadataServerDead = errors.New("cluster: the METADATA tablet's server was declared dead")

// metadataSuspectFull: every metadataSuspectFull-th read at a suspect
// server has the full metadataRoundReadTimeout.
const metadataSuspectFull = 4

// metadataScanParallelism bounds the servers whose METADATA tablets the
// master reads at once.
const metadataScanParallelism = 8

// metadataStore is the master's view of METADATA (master.Metadata): the
// root's location in the lock service, the other tablets' rows read and
// written through a client whose locator walks the hierarchy.
//
// Every read also finishes the splits that tablet servers committed to
// METADATA but did not finish (finishSplits): see commitSplitNew for the
// commit protocol.
type metadataStore struct {
	kv  coord.KV
	cl  *client.Client
	now func() time.Time
	log *slog.Logger
	// states are the tablets' saved states (tablet.NewBlobStateStore
	// under StatePrefix), from which finishSplits learns a split's
	// children. Without them unfinished splits stay as they are: their
	// tablets are held (overlapping rows) and never assigned.
	states tablet.StateStore

	mu   sync.Mutex
	rows map[string]meta.Location // tablet ID → its row as last read
	// suspects counts, per server, the reads of METADATA tablets there
	// that failed in a row: they are read with the shorter
	// metadataSuspectTimeout (every metadataSuspectFull-th with the full
	// one, in case a live server is only slow) until one succeeds, so
	// that a dead server holding METADATA tablets does not slow every
	// round — and with them the detection of its death — by
	// metadataRoundReadTimeout.
	suspects map[string]int
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
// every tablet, uses allTablets. Both finish on the way the splits that
// tablet servers committed but did not finish (finishSplits), so that a
// server dying in the middle of a split's commit leaves no tablet held
// for ever nor any range unassigned.
func (m *metadataStore) Tablets(ctx context.Context) ([]assign.Tablet, error) {
	ts, _, err := m.read(ctx, nil)
	return ts, err
}

// allTablets is Tablets that fails unless every METADATA tablet was read.
func (m *metadataStore) allTablets(ctx context.Context) ([]assign.Tablet, error) {
	ts, complete, err := m.read(ctx, nil)
	if err == nil && !complete {
		err = errors.New("cluster: METADATA not wholly readable (a METADATA tablet is unassigned or moving)")
	}
	return ts, err
}

// read returns the tablets METADATA lists and whether every METADATA
// tablet could be read. METADATA tablets that METADATA places at a server
// dead reports (nil: none) are not read, and count as unread: the master
// declared that server dead, so it serves nothing, and a read there
// would only wait for its timeout — which held up a round, and with it
// the recovery that round was to start, by 1.8 s after a paused server's
// death (session 31).
func (m *metadataStore) read(ctx context.Context, dead func(server string) bool) (_ []assign.Tablet, complete bool, _ error) {
	if dead == nil {
		dead = func(string) bool { return false }
	}
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
	if root.Server == "" || dead(root.Server) {
		return out, false, nil
	}
	metas, err := m.readTablet(ctx, root, nil)
	if err != nil {
		m.warn("reading the root tablet", err)
		return out, false, nil
	}
	if len(metas) == 0 {
		// A new cluster: METADATA's second tablet holds every user row.
		st := tabletdesc.State{ID: meta.MetaTabletID, Start: meta.RootTabletEnd()}
		rm, err := meta.StateMutation(meta.MetadataTable, st, cell.ServerTimestamp)
		if err != nil {
			return nil, false, err
		}
		if err := m.cl.Apply(ctx, meta.MetadataTableName, rm); err != nil {
			return nil, false, fmt.Errorf("creating METADATA's first tablet row: %w", err)
		}
		metas = []meta.MetadataEntry{{Table: meta.MetadataTable, State: st}}
	}
	// METADATA tablets split like user tablets, their splits committed
	// to the root tablet's rows: finish those a server left unfinished.
	metas = m.finishSplits(ctx, nil, meta.RootTabletEnd(), metas)
	// While a METADATA split is unfinished its parent's row overlaps its
	// left children's (which sort first): each part of METADATA is read
	// once, from where the rows before it ended. Servers are read in
	// parallel, the METADATA tablets of one server one after another: a
	// dead server's take a timeout each to fail, which must add up
	// neither over a round nor over its tablets — after one failed, the
	// server's others wait for the next round.
	type part struct {
		l     meta.Location
		start []byte
		users []meta.MetadataEntry
		err   error
	}
	parts := make([]part, len(metas))
	byServer := make(map[string][]*part)
	var servers []string
	reached := meta.RootTabletEnd()
	for i, e := range metas {
		p := &parts[i]
		p.l = e.Location()
		if p.l.Server == "" {
			continue
		}
		p.start = bytes.Clone(p.l.Start)
		if bytes.Compare(reached, p.start) > 0 {
			p.start = bytes.Clone(reached)
		}
		if !p.l.Range().EndsAfter(p.start) {
			continue // read already, as part of an overlapping row's range
		}
		if len(p.l.End) > 0 {
			reached = p.l.End
		}
		if byServer[p.l.Server] == nil {
			servers = append(servers, p.l.Server)
		}
		byServer[p.l.Server] = append(byServer[p.l.Server], p)
	}
	sem := make(chan struct{}, metadataScanParallelism)
	var wg sync.WaitGroup
	for _, server := range servers {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			var failed error
			if dead(server) {
				failed = errMetadataServerDead
			}
			for _, p := range byServer[server] {
				if failed == errMetadataServerDead {
					p.err = failed
					continue
				}
				if failed != nil {
					p.err = fmt.Errorf("not read: another METADATA tablet of %s failed: %w", server, failed)
					continue
				}
				p.users, p.err = m.readTablet(ctx, p.l, p.start)
				if p.err != nil {
					failed = p.err
					continue
				}
				p.users = m.finishMerges(ctx, p.start, p.l.End, p.users)
				p.users = m.finishSplits(ctx, p.start, p.l.End, p.users)
			}
		})
	}
	wg.Wait()
	// Forget the suspects that hold no METADATA tablet any more.
	m.mu.Lock()
	for server := range m.suspects {
		if byServer[server] == nil && server != root.Server {
			delete(m.suspects, server)
		}
	}
	m.mu.Unlock()
	complete = true
	for _, p := range parts {
		rows[p.l.TabletID] = p.l
		out = append(out, assignTablet(p.l, assign.Meta))
		switch {
		case p.l.Server == "", errors.Is(p.err, errMetadataServerDead):
			complete = false
		case p.err != nil:
			m.warn("reading METADATA tablet "+p.l.TabletID, p.err)
			complete = false
		}
	}
	for _, p := range parts {
		for _, e := range p.users {
			u := e.Location()
			rows[u.TabletID] = u
			out = append(out, assignTablet(u, assign.User))
		}
	}
	return out, complete, nil
}

// warn logs a METADATA tablet that could not be read: at INFO when
// nothing listens at its server's address — a dead server, whose tablets
// the master recovers (also the previous run's, at every restart of
// tabula dev) — else as a warning.
func (m *metadataStore) warn(what string, err error) {
	if m.log == nil {
		return
	}
	if errors.Is(err, errMetadataServerGone) {
		m.log.Info("METADATA tablet at a dead server: read once recovered", "what", what, "err", err)
		return
	}
	m.log.Warn("METADATA read incomplete", "what", what, "err", err)
}

func assignTablet(l meta.Location, k assign.Kind) assign.Tablet {
	return assign.Tablet{ID: assign.TabletID(l.TabletID), Table: l.Table.String(), Start: string(l.Start), End: string(l.End), LastServer: assign.ServerID(l.Server), Kind: k}
}

// scan reads the METADATA rows in [start, end) as locations.
func (m *metadataStore) scan(ctx context.Context, start, end []byte) ([]meta.Location, error) {
	es, err := m.scanEntries(ctx, start, end)
	if err != nil {
		return nil, err
	}
	out := make([]meta.Location, len(es))
	for i, e := range es {
		out[i] = e.Location()
	}
	return out, nil
}

// scanEntries reads the METADATA rows in [start, end), in key order,
// without their event logs.
func (m *metadataStore) scanEntries(ctx context.Context, start, end []byte) ([]meta.MetadataEntry, error) {
	// A METADATA tablet that is moving answers "not serving" until the
	// master itself reassigns it: fail soon rather than retry for the
	// whole round.
	return m.scanEntriesWithin(ctx, metadataScanTimeout, start, end)
}

// readTablet reads the METADATA rows in [start, l.End) of the METADATA
// tablet at l, within metadataRoundReadTimeout, or metadataSuspectTimeout
// while reads at l.Server keep failing (metadataStore.suspects). The read
// goes to l.Server, where METADATA (or the root key) just said the tablet
// is: the client is told so first (client.CacheLocations).
func (m *metadataStore) readTablet(ctx context.Context, l meta.Location, start []byte) ([]meta.MetadataEntry, error) {
	server, end := l.Server, l.End
	m.cl.CacheLocations(l)
	m.mu.Lock()
	failures := m.suspects[server]
	m.mu.Unlock()
	timeout := metadataRoundReadTimeout
	if failures%metadataSuspectFull != 0 {
		timeout = metadataSuspectTimeout
	}
	// A read that has not answered soon is checked on: if the server's
	// address refuses connections (a killed server), the read fails now
	// rather than at its timeout, so that the round — and the failure
	// detection it carries — goes on.
	rctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	probe := time.AfterFunc(metadataProbeAfter, func() {
		if refused(rctx, meta.ServerAddr(server)) {
			cancel(errMetadataServerGone)
		}
	})
	es, err := m.scanEntriesWithin(rctx, timeout, start, end)
	probe.Stop()
	if err != nil && (errors.Is(context.Cause(rctx), errMetadataServerGone) ||
		status.Code(err) == codes.Unavailable && refused(ctx, meta.ServerAddr(server))) {
		// Gone before the probe, or refused at once.
		err = fmt.Errorf("%w: %v", errMetadataServerGone, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err == nil {
		delete(m.suspects, server)
		return es, nil
	}
	if m.suspects == nil {
		m.suspects = make(map[string]int)
	}
	m.suspects[server]++
	return nil, err
}

// scanEntriesWithin is scanEntries giving up after timeout.
func (m *metadataStore) scanEntriesWithin(ctx context.Context, timeout time.Duration, start, end []byte) ([]meta.MetadataEntry, error) {
	ctx, cancel := context.WithTimeout(unrouted(ctx), timeout)
	defer cancel()
	s := m.cl.Scan(ctx, meta.MetadataTableName, client.ScanOptions{Start: start, End: end, Families: []string{meta.FamilyLoc, meta.FamilyState}, MaxVersions: 1})
	defer s.Close()
	var out []meta.MetadataEntry
	for s.Next() {
		e, err := meta.ParseMetadataRow(s.Row())
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, s.Err()
}

// unrouted marks the METADATA reads of ctx as a gateway marks the requests
// it forwards (gateway.ForwardedKey): the server they reach answers from
// its own tablets, "not serving" at once if it lacks the one asked for,
// instead of routing the read itself and retrying until the deadline. The
// master's client located the tablet already, and a server that does not
// hold it is news for the master's next round: a killed server started
// again on its address is asked for the METADATA tablets METADATA still
// places there, and its gateway spent each read's whole timeout (0.5 or
// 3 s) waiting for them to be reassigned — by this master, whose rounds
// it held up.
func unrouted(ctx context.Context) context.Context {
	return metadata.AppendToOutgoingContext(ctx, gateway.ForwardedKey, "1")
}

// SetLocation implements master.Metadata: the root's location goes to the
// lock service, every other tablet's to its METADATA row, with a load
// event in the row's log — only if the row still names the tablet. A
// load answered after the tablet's row went (its table deleted
// meanwhile) or changed hands (a split committed, a merge) wrote a
// location into a row that was not the tablet's, or brought a deleted
// row back without its state; now it fails, and the master's next read
// of METADATA decides.
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
		if err := m.kv.Put(ctx, coord.KeyRoot, b); err != nil {
			return err
		}
		// This process's own client reads and writes the root there at
		// once.
		if m.cl != nil {
			m.cl.CacheLocations(l)
		}
		return nil
	}
	rm := locationWithEvent(l, meta.EventLoad, "", m.now())
	written, err := m.cl.CheckAndMutate(ctx, meta.MetadataTableName, rm.Row, namesTabletPredicate(tabletID), rm.Mutations, nil)
	if err != nil {
		return err
	}
	if !written {
		return fmt.Errorf("cluster: METADATA's row of tablet %s no longer names it (its table deleted, or it split or merged meanwhile): location not recorded", tabletID)
	}
	return nil
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

// hasRows reports whether METADATA has a row of table, reading at most
// one (tableRows reads them all).
func (m *metadataStore) hasRows(ctx context.Context, table meta.TableID) (bool, error) {
	start, end := meta.MetadataTableRange(table)
	ctx, cancel := context.WithTimeout(unrouted(ctx), metadataScanTimeout)
	defer cancel()
	s := m.cl.Scan(ctx, meta.MetadataTableName, client.ScanOptions{Start: start, End: end, Families: []string{meta.FamilyState}, MaxVersions: 1, Limit: 1})
	defer s.Close()
	found := s.Next()
	return found, s.Err()
}

// Splits in METADATA.
//
// A tablet server that split tablet P of [S, E) into children C1 … Cn
// (tabletdesc.State.SplitInto of P's saved state, each child's saved state
// holding its range and Parent P) commits the split to METADATA in two
// steps (commitSplitNew, commitSplitLast):
//
//  1. the rows of C1 … Cn-1, whose end rows are new, each written only if
//     absent, located at the splitting server with P's epoch and with
//     Parent P in their state columns. The first of these writes is the
//     commit point: from then on METADATA says that P is split.
//  2. P's row is replaced by Cn's (same end row E), only if it still
//     names P.
//
// Between the two METADATA shows P overlapping its left children, never a
// gap: the master's planner treats overlapping rows as a conflict and
// assigns, moves and merges none of them (assign.Plan's markConflicts),
// while P's server, alive, keeps serving the children, which it reports
// and which cover P's range (so P is not assigned either). If the server
// dies in between, every read of METADATA finishes the split
// (finishSplits): it finds P's row overlapped by a row recording a parent,
// reads P's saved state for its children and theirs for their ranges, and
// writes the missing children's rows where P's row says P was (server and
// epoch: that server's commit log holds their recent writes, and a
// recovery replays it), Cn's replacing P's row only if it still names P.
// So neither the splitting server completing the split concurrently nor a
// move of Cn after the split finished is overwritten, and a left child's
// row is never lost to a crash: it is the commit.

// splitChild is a child of a split as METADATA records it.
type splitChild struct {
	ID         string
	Start, End []byte
}

// splitChildMutation is the METADATA row of child c of the split of
// parent, located at server with epoch, with a split event saying detail.
func splitChildMutation(table meta.TableID, c splitChild, parent, server string, epoch uint64, detail string, now time.Time) (cell.RowMutation, error) {
	rm, err := meta.StateMutation(table, tabletdesc.State{ID: c.ID, Start: c.Start, End: c.End, Parent: parent}, cell.ServerTimestamp)
	if err != nil {
		return cell.RowMutation{}, err
	}
	loc := locationWithEvent(meta.Location{Table: table, Start: c.Start, End: c.End, TabletID: c.ID, Server: server, Epoch: epoch}, meta.EventSplit, detail, now)
	rm.Mutations = append(rm.Mutations, loc.Mutations...)
	return rm, nil
}

// stateIDFilter keeps a METADATA row's newest state:id cell.
func stateIDFilter() []*bigtablepb.RowFilter {
	return []*bigtablepb.RowFilter{
		{Filter: &bigtablepb.RowFilter_FamilyNameRegexFilter{FamilyNameRegexFilter: meta.FamilyState}},
		{Filter: &bigtablepb.RowFilter_ColumnQualifierRegexFilter{ColumnQualifierRegexFilter: []byte(meta.QualID)}},
		{Filter: &bigtablepb.RowFilter_CellsPerColumnLimitFilter{CellsPerColumnLimitFilter: 1}},
	}
}

// hasTabletPredicate matches a METADATA row that describes a tablet.
func hasTabletPredicate() *bigtablepb.RowFilter {
	return &bigtablepb.RowFilter{Filter: &bigtablepb.RowFilter_Chain_{Chain: &bigtablepb.RowFilter_Chain{Filters: stateIDFilter()}}}
}

// namesTabletPredicate matches a METADATA row that describes tablet id.
func namesTabletPredicate(id string) *bigtablepb.RowFilter {
	v := []byte(id)
	return &bigtablepb.RowFilter{Filter: &bigtablepb.RowFilter_Chain_{Chain: &bigtablepb.RowFilter_Chain{Filters: append(stateIDFilter(),
		&bigtablepb.RowFilter{Filter: &bigtablepb.RowFilter_ValueRangeFilter{ValueRangeFilter: &bigtablepb.ValueRange{
			StartValue: &bigtablepb.ValueRange_StartValueClosed{StartValueClosed: v},
			EndValue:   &bigtablepb.ValueRange_EndValueClosed{EndValueClosed: v},
		}}})}}}
}

// rowTabletID returns the ID of the tablet METADATA's row key describes,
// "" if there is no such row.
func rowTabletID(ctx context.Context, cl *client.Client, key []byte) (string, error) {
	row, ok, err := cl.ReadRow(ctx, meta.MetadataTableName, key, client.ScanOptions{Families: []string{meta.FamilyLoc, meta.FamilyState}, MaxVersions: 1})
	if err != nil || !ok {
		return "", err
	}
	e, err := meta.ParseMetadataRow(row)
	return e.State.ID, err
}

// writeRowIfAbsent applies rm, the row of a split's child, unless its row
// key already describes a tablet: the child (an earlier attempt, or the
// master finishing the split, wrote it) or, once the child split in turn,
// the child's last child. Nothing else writes a row with a split child's
// end row, which is new.
func writeRowIfAbsent(ctx context.Context, cl *client.Client, rm cell.RowMutation) error {
	_, err := cl.CheckAndMutate(ctx, meta.MetadataTableName, rm.Row, hasTabletPredicate(), nil, rm.Mutations)
	return err
}

// replaceParentRow applies rm, the row of tablet id, if its row key still
// describes tablet parent. A row describing id already is no error (the
// split was finished by someone else); any other is.
func replaceParentRow(ctx context.Context, cl *client.Client, rm cell.RowMutation, parent, id string) error {
	replaced, err := cl.CheckAndMutate(ctx, meta.MetadataTableName, rm.Row, namesTabletPredicate(parent), rm.Mutations, nil)
	if err != nil || replaced {
		return err
	}
	got, err := rowTabletID(ctx, cl, rm.Row)
	if err != nil {
		return err
	}
	if got != id {
		return fmt.Errorf("cluster: METADATA row of split tablet %s names tablet %q", parent, got)
	}
	return nil
}

// commitSplitNew is the first step of committing the split of parent into
// children (in range order) to METADATA, made by server: it reads the
// parent's row for its epoch, then writes the children's rows whose end
// rows are new (all but the last), each if absent. The first write
// commits the split. finished reports that the parent's row already
// describes the last child: the split is in METADATA whole (an earlier
// attempt, or the master, finished it) and nothing was written. A parent
// without a row (its own parent's split is not yet in METADATA) is an
// error: the commit is retried.
func commitSplitNew(ctx context.Context, cl *client.Client, server string, table meta.TableID, parent string, children []splitChild, now time.Time) (epoch uint64, finished bool, err error) {
	last := children[len(children)-1]
	row, ok, err := cl.ReadRow(ctx, meta.MetadataTableName, meta.MetadataRowKey(table, last.End), client.ScanOptions{Families: []string{meta.FamilyLoc, meta.FamilyState}, MaxVersions: 1})
	if err != nil {
		return 0, false, err
	}
	if !ok {
		return 0, false, fmt.Errorf("cluster: split tablet %s has no METADATA row (yet)", parent)
	}
	l, err := meta.ParseLocation(row)
	if err != nil {
		return 0, false, err
	}
	switch l.TabletID {
	case last.ID:
		return l.Epoch, true, nil
	case parent:
	default:
		return 0, false, fmt.Errorf("cluster: METADATA row of split tablet %s names tablet %s", parent, l.TabletID)
	}
	for _, c := range children[:len(children)-1] {
		rm, err := splitChildMutation(table, c, parent, server, l.Epoch, "from "+parent, now)
		if err != nil {
			return 0, false, err
		}
		if err := writeRowIfAbsent(ctx, cl, rm); err != nil {
			return 0, false, err
		}
	}
	return l.Epoch, false, nil
}

// commitSplitLast is the second and last step of a split's commit (see
// commitSplitNew): the parent's row becomes the last child's, located at
// server with epoch, if it still names the parent.
func commitSplitLast(ctx context.Context, cl *client.Client, server string, table meta.TableID, parent string, last splitChild, epoch uint64, now time.Time) error {
	rm, err := splitChildMutation(table, last, parent, server, epoch, "from "+parent, now)
	if err != nil {
		return err
	}
	return replaceParentRow(ctx, cl, rm, parent, last.ID)
}

// splitRepair is one METADATA row write that finishes a split
// (splitRepairs).
type splitRepair struct {
	Table meta.TableID
	// Parent is the split tablet's row as read: the child is located
	// where it says.
	Parent meta.Location
	Child  splitChild
	// ReplacesParent: the child's row is the parent's (same end row) and
	// is written only if it still names the parent; other children's rows
	// are written only if absent.
	ReplacesParent bool
}

// unfinishedSplits returns the rows (of rows, in METADATA key order, as a
// scan returns them) that may be splits committed but not finished: those
// whose range overlaps the row before them, of the same table, when that
// row records a parent. A split child's row, written first, sorts before
// its parent's (its end row is inside the parent's range); so do the
// children of a child split meanwhile. Only their saved states tell
// (splitRepairs).
func unfinishedSplits(rows []meta.MetadataEntry) []meta.MetadataEntry {
	var out []meta.MetadataEntry
	for i := 1; i < len(rows); i++ {
		prev, p := rows[i-1], rows[i]
		if prev.Table == p.Table && prev.State.Parent != "" && len(prev.State.End) > 0 && bytes.Compare(prev.State.End, p.State.Start) > 0 {
			out = append(out, p)
		}
	}
	return out
}

// splitRepairs decides which rows finish the splits committed to METADATA
// but not finished, given rows (in METADATA key order) and the saved
// states of the tablets unfinishedSplits returns and of their children
// (tablet ID → state). A candidate whose state records no split is left
// alone (its overlap is something else, which the planner holds); so is one
// whose states are missing or do not describe a split of its range, with an
// error saying why (the others are still repaired).
//
// For a split parent P: its last child replaces P's row; every other child
// gets its row unless METADATA has it already, or has rows of the child's
// own children (a child split in turn) that cover its range.
func splitRepairs(rows []meta.MetadataEntry, states map[string]tabletdesc.State) ([]splitRepair, error) {
	var out []splitRepair
	var errs []error
	for _, p := range unfinishedSplits(rows) {
		ps, ok := states[p.State.ID]
		if !ok {
			errs = append(errs, fmt.Errorf("tablet %s: no saved state", p.State.ID))
			continue
		}
		if len(ps.SplitInto) == 0 {
			continue // not split: the overlap is not a split's
		}
		children, err := splitChildren(p, ps, states)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		loc := p.Location()
		for i, c := range children {
			if i == len(children)-1 {
				out = append(out, splitRepair{Table: p.Table, Parent: loc, Child: c, ReplacesParent: true})
				continue
			}
			if !covered(rows, p.Table, c) {
				out = append(out, splitRepair{Table: p.Table, Parent: loc, Child: c})
			}
		}
	}
	if len(errs) > 0 {
		return out, fmt.Errorf("cluster: unfinished splits left alone: %w", errors.Join(errs...))
	}
	return out, nil
}

// splitChildren returns the children of split parent p (saved state ps)
// from their saved states, checking that they tile p's range in order.
func splitChildren(p meta.MetadataEntry, ps tabletdesc.State, states map[string]tabletdesc.State) ([]splitChild, error) {
	var out []splitChild
	at := p.State.Start
	for _, id := range ps.SplitInto {
		cs, ok := states[id]
		if !ok {
			return nil, fmt.Errorf("tablet %s: no saved state of its child %s", p.State.ID, id)
		}
		if !bytes.Equal(cs.Start, at) || cs.Range().Empty() {
			return nil, fmt.Errorf("tablet %s: child %s has range [%q, %q), want a range from %q", p.State.ID, id, cs.Start, cs.End, at)
		}
		out = append(out, splitChild{ID: id, Start: cs.Start, End: cs.End})
		at = cs.End
	}
	if !bytes.Equal(at, p.State.End) {
		return nil, fmt.Errorf("tablet %s: children end at %q, not at its end %q", p.State.ID, at, p.State.End)
	}
	return out, nil
}

// covered reports whether rows describe child c of table: a row of its
// own, or rows within its range that cover it without a gap.
func covered(rows []meta.MetadataEntry, table meta.TableID, c splitChild) bool {
	var within []meta.MetadataEntry
	for _, r := range rows {
		if r.Table != table {
			continue
		}
		if r.State.ID == c.ID {
			return true
		}
		if bytes.Compare(r.State.Start, c.Start) >= 0 && len(r.State.End) > 0 && bytes.Compare(r.State.End, c.End) <= 0 {
			within = append(within, r)
		}
	}
	slices.SortFunc(within, func(a, b meta.MetadataEntry) int { return bytes.Compare(a.State.Start, b.State.Start) })
	at := c.Start
	for _, r := range within {
		if bytes.Compare(r.State.Start, at) > 0 {
			return false // a gap
		}
		if bytes.Compare(r.State.End, at) > 0 {
			at = r.State.End
		}
	}
	return bytes.Equal(at, c.End)
}

// finishSplits finishes the unfinished splits among rows, the rows of the
// METADATA tablet [start, end) just read (see the comment on splits
// above), and returns METADATA's rows as they are then: read again after a
// repair, so that a write that lost to a concurrent one shows what won.
// What it cannot finish (no state store, a state unreadable, a write
// failed) stays as read: the planner holds the overlapping tablets, and
// the next read tries again.
func (m *metadataStore) finishSplits(ctx context.Context, start, end []byte, rows []meta.MetadataEntry) []meta.MetadataEntry {
	cands := unfinishedSplits(rows)
	if len(cands) == 0 {
		return rows
	}
	if m.states == nil {
		m.warn("finishing splits", errors.New("no state store: overlapping METADATA rows left as they are"))
		return rows
	}
	states := make(map[string]tabletdesc.State)
	load := func(id string) bool {
		if _, ok := states[id]; ok {
			return true
		}
		st, err := m.states.Load(ctx, id)
		if err != nil {
			m.warn("loading the state of tablet "+id, err)
			return false
		}
		states[id] = st
		return true
	}
	for _, p := range cands {
		if load(p.State.ID) {
			for _, c := range states[p.State.ID].SplitInto {
				load(c)
			}
		}
	}
	repairs, err := splitRepairs(rows, states)
	if err != nil {
		m.warn("finishing splits", err)
	}
	if len(repairs) == 0 {
		return rows
	}
	now := m.now()
	for _, r := range repairs {
		p := r.Parent
		rm, err := splitChildMutation(r.Table, r.Child, p.TabletID, p.Server, p.Epoch, "from "+p.TabletID+", finished by the master", now)
		if err == nil {
			if r.ReplacesParent {
				err = replaceParentRow(ctx, m.cl, rm, p.TabletID, r.Child.ID)
			} else {
				err = writeRowIfAbsent(ctx, m.cl, rm)
			}
		}
		if err != nil {
			m.warn("finishing the split of tablet "+p.TabletID, err)
			continue
		}
		if m.log != nil {
			m.log.Info("finished a split in METADATA", "table", r.Table.String(), "parent", p.TabletID, "child", r.Child.ID, "server", p.Server, "epoch", p.Epoch)
		}
	}
	again, err := m.scanEntries(ctx, start, end)
	if err != nil {
		m.warn("reading METADATA again after finishing splits", err)
		return rows
	}
	return again
}
