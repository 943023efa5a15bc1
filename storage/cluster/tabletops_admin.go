package cluster

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tabuladb/tabula/storage/cluster/clusterpb"
	"github.com/tabuladb/tabula/storage/master"
	"github.com/tabuladb/tabula/storage/master/adminextpb"
	"github.com/tabuladb/tabula/storage/master/assign"
	"github.com/tabuladb/tabula/storage/meta"
)

// masterTabletOps is the master's TabletOperations (the admin extension
// of storage/master/adminextpb/tablets.proto): forced splits, merges and
// compactions of the tablet holding a row, as the fault campaign's
// nemesis and operators ask for them. Only the active master acts; it
// finds the tablet and its server in the State of its last round.
type masterTabletOps struct {
	adminextpb.UnimplementedTabletOperationsServer
	m *Master
}

// servedTablet is a tablet of the last round's State and the server
// holding it ("" if none).
type servedTablet struct {
	assign.Tablet
	server assign.ServerID
	served assign.Served
}

// tableTablets returns the tablets of table (projects/P/instances/I/tables/T)
// in row order, as the active master last saw them.
func (o *masterTabletOps) tableTablets(ctx context.Context, name string) (meta.TableID, []servedTablet, error) {
	id, err := meta.ParseTableName(name)
	if err != nil {
		return meta.TableID{}, nil, status.Errorf(codes.InvalidArgument, "table: %v", err)
	}
	if id == meta.MetadataTable {
		return meta.TableID{}, nil, status.Error(codes.FailedPrecondition, "table: METADATA's tablets are the master's own")
	}
	if !o.m.Leading() {
		return meta.TableID{}, nil, status.Error(codes.Unavailable, "this master is a standby: ask the active master (the master key's value in the lock service, or any tablet server, which forwards)")
	}
	out := tabletsOf(o.m.loop.Observed(), id)
	if len(out) == 0 {
		return id, nil, noTabletsError(ctx, o.m.catalog(), id)
	}
	return id, out, nil
}

// tabletsOf returns the tablets of table id in st, in row order, each
// with the live server that reports serving it ("" if none).
func tabletsOf(st assign.State, id meta.TableID) []servedTablet {
	holders := make(map[assign.TabletID]assign.ServerID)
	reports := make(map[assign.TabletID]assign.Served)
	for _, s := range st.Live {
		for _, sv := range s.Serving {
			holders[sv.ID] = s.ID
			reports[sv.ID] = sv
		}
	}
	var out []servedTablet
	for _, tb := range st.Tablets {
		if tb.Table == id.String() {
			out = append(out, servedTablet{Tablet: tb, server: holders[tb.ID], served: reports[tb.ID]})
		}
	}
	slices.SortFunc(out, func(a, b servedTablet) int { return bytes.Compare([]byte(a.Start), []byte(b.Start)) })
	return out
}

// noTabletsError is the answer for a table of which the master's last
// view holds no tablet: NOT_FOUND only when the catalog has no such table.
// A table the catalog lists is UNAVAILABLE — a master that took over
// moments ago has not read METADATA yet, and a round that could not read
// part of METADATA (its tablets moving after a restart) misses those
// tables: telling a client that an existing table is gone would be a
// wrong answer, where "retry" is only a late one.
func noTabletsError(ctx context.Context, catalog meta.Catalog, id meta.TableID) error {
	_, err := catalog.Get(ctx, id)
	switch {
	case errors.Is(err, meta.ErrTableNotFound):
		return status.Errorf(codes.NotFound, "table %s not found", id)
	case err != nil:
		return status.Errorf(codes.Unavailable, "table %s: no tablets in the master's view, and the catalog could not be read to tell whether it exists (%v): retry", id, err)
	}
	return status.Errorf(codes.Unavailable, "table %s: its tablets are not in the active master's view yet (it took over moments ago, or METADATA is being read): retry", id)
}

// holding returns the index of the tablet of tabs holding row.
func holding(tabs []servedTablet, row []byte) int {
	return slices.IndexFunc(tabs, func(t servedTablet) bool {
		return string(row) >= t.Start && (t.End == "" || string(row) < t.End)
	})
}

func tabletInfoPB(t servedTablet) *adminextpb.TabletInfo {
	return &adminextpb.TabletInfo{TabletId: string(t.ID), StartKey: []byte(t.Start), EndKey: []byte(t.End), Server: string(t.server),
		Bytes: t.served.Bytes, SharesFiles: t.served.SharesFiles}
}

// heldTablet finds the tablet holding row and checks it is served.
func (o *masterTabletOps) heldTablet(ctx context.Context, table string, row []byte) (meta.TableID, []servedTablet, int, error) {
	id, tabs, err := o.tableTablets(ctx, table)
	if err != nil {
		return id, nil, 0, err
	}
	i := holding(tabs, row)
	if i < 0 {
		return id, nil, 0, status.Errorf(codes.Unavailable, "row_key %q: no tablet of %s holds it in METADATA as last read (a split or merge under way): retry", row, table)
	}
	if tabs[i].server == "" {
		return id, nil, 0, status.Errorf(codes.Unavailable, "tablet %s is not served at the moment (moving, recovering or merging): retry", tabs[i].ID)
	}
	return id, tabs, i, nil
}

func (o *masterTabletOps) SplitTablet(ctx context.Context, req *adminextpb.SplitTabletRequest) (*adminextpb.SplitTabletResponse, error) {
	id, tabs, i, err := o.heldTablet(ctx, req.GetTable(), req.GetRowKey())
	if err != nil {
		return nil, err
	}
	t := tabs[i]
	if k := string(req.GetSplitKey()); k != "" && (k <= t.Start || (t.End != "" && k >= t.End)) {
		return nil, status.Errorf(codes.InvalidArgument, "split_key %q: not strictly inside tablet %s's range [%q, %q)", k, t.ID, t.Start, t.End)
	}
	cc, err := o.m.conns.get(meta.ServerAddr(string(t.server)))
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "server %s: %v", t.server, err)
	}
	resp, err := clusterpb.NewTabletOpsClient(cc).SplitTablet(ctx, &clusterpb.SplitTabletRequest{Table: id.String(), TabletId: string(t.ID), SplitKey: req.GetSplitKey()})
	if err != nil {
		return nil, err
	}
	out := &adminextpb.SplitTabletResponse{ParentId: string(t.ID)}
	var children []assign.TabletID
	for _, c := range resp.GetChildren() {
		out.Children = append(out.Children, &adminextpb.TabletInfo{TabletId: c.GetTabletId(), StartKey: c.GetStartKey(), EndKey: c.GetEndKey(), Server: string(t.server)})
		children = append(children, assign.TabletID(c.GetTabletId()))
	}
	// The split is committed; the master's view (which ListTablets,
	// CompactTablet and the next SplitTablet read) has it after its next
	// round. Ask for that round now and wait for it, so that an operator's
	// next call sees the children rather than the parent.
	o.awaitServed(ctx, id, children)
	return out, nil
}

// splitViewWait bounds how long SplitTablet waits for the master's view
// to show the children served (they are, on the parent's server, from
// the split's commit: the next round sees them unless it fails).
const splitViewWait = 10 * time.Second

// awaitServed waits, up to splitViewWait or ctx, until the master's last
// round shows every tablet of ids served, waking the loop for rounds.
// It reports nothing: the operation it follows has succeeded either way.
func (o *masterTabletOps) awaitServed(ctx context.Context, id meta.TableID, ids []assign.TabletID) {
	deadline := time.Now().Add(splitViewWait)
	for {
		o.m.loop.Wake()
		served := 0
		for _, t := range tabletsOf(o.m.loop.Observed(), id) {
			if t.server != "" && slices.Contains(ids, t.ID) {
				served++
			}
		}
		if served == len(ids) || time.Now().After(deadline) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (o *masterTabletOps) MergeTablets(ctx context.Context, req *adminextpb.MergeTabletsRequest) (*adminextpb.MergeTabletsResponse, error) {
	_, tabs, i, err := o.heldTablet(ctx, req.GetTable(), req.GetRowKey())
	if err != nil {
		return nil, err
	}
	if i+1 >= len(tabs) || tabs[i].End == "" {
		return nil, status.Errorf(codes.FailedPrecondition, "row_key %q: tablet %s is the table's last; it has no right neighbour to merge with", req.GetRowKey(), tabs[i].ID)
	}
	left, right := tabs[i], tabs[i+1]
	if right.Start != left.End {
		return nil, status.Errorf(codes.Unavailable, "tablets %s and %s are not adjacent in METADATA as last read: retry", left.ID, right.ID)
	}
	merged, err := o.m.loop.RequestMerge(ctx, left.Tablet.Table, left.ID, right.ID)
	switch {
	case err == nil:
	case errors.Is(err, master.ErrNoMerge):
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	case ctx.Err() != nil:
		return nil, status.FromContextError(ctx.Err()).Err()
	default:
		return nil, status.Errorf(codes.Unavailable, "merging %s and %s: %v", left.ID, right.ID, err)
	}
	return &adminextpb.MergeTabletsResponse{LeftId: string(left.ID), RightId: string(right.ID),
		Merged: tabletInfoPB(servedTablet{Tablet: merged})}, nil
}

func (o *masterTabletOps) CompactTablet(ctx context.Context, req *adminextpb.CompactTabletRequest) (*adminextpb.CompactTabletResponse, error) {
	id, tabs, i, err := o.heldTablet(ctx, req.GetTable(), req.GetRowKey())
	if err != nil {
		return nil, err
	}
	t := tabs[i]
	cc, err := o.m.conns.get(meta.ServerAddr(string(t.server)))
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "server %s: %v", t.server, err)
	}
	if _, err := clusterpb.NewTabletOpsClient(cc).CompactTablet(ctx, &clusterpb.CompactTabletRequest{Table: id.String(), TabletId: string(t.ID), Major: req.GetMajor()}); err != nil {
		return nil, err
	}
	return &adminextpb.CompactTabletResponse{TabletId: string(t.ID)}, nil
}

func (o *masterTabletOps) ListTablets(ctx context.Context, req *adminextpb.ListTabletsRequest) (*adminextpb.ListTabletsResponse, error) {
	_, tabs, err := o.tableTablets(ctx, req.GetTable())
	if err != nil {
		return nil, err
	}
	out := &adminextpb.ListTabletsResponse{}
	for _, t := range tabs {
		out.Tablets = append(out.Tablets, tabletInfoPB(t))
	}
	return out, nil
}

// Compact implements master.TabletCompactor over TabletOps.
func (s *serverClient) Compact(ctx context.Context, server, table, tabletID string, major bool) error {
	cc, err := s.conns.get(meta.ServerAddr(server))
	if err != nil {
		return err
	}
	_, err = clusterpb.NewTabletOpsClient(cc).CompactTablet(ctx, &clusterpb.CompactTabletRequest{Table: table, TabletId: tabletID, Major: major})
	return err
}

var _ master.TabletCompactor = (*serverClient)(nil)

// Compact implements master.TabletCompactor, recording the compaction as
// an event.
func (e *eventServers) Compact(ctx context.Context, server, table, tabletID string, major bool) error {
	err := e.inner.Compact(ctx, server, table, tabletID, major)
	detail := "major"
	if !major {
		detail = "merging"
	}
	if err != nil {
		detail += ": " + err.Error()
	}
	e.events.add(event{Kind: "compact", Tablet: tabletID, Server: server, Detail: detail})
	return err
}

var _ master.TabletCompactor = (*eventServers)(nil)
