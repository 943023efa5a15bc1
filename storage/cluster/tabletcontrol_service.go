package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/cluster/clusterpb"
	"github.com/tabuladb/tabula/storage/commitlog"
	"github.com/tabuladb/tabula/storage/coord"
	"github.com/tabuladb/tabula/storage/meta"
	"github.com/tabuladb/tabula/storage/tabletserver"
)

// tabletControlService is a tablet server's TabletControl: the master's requests.
type tabletControlService struct {
	clusterpb.UnimplementedTabletControlServer
	s *TabletServer
	// sorting holds a token per segment being sorted (sortSlots).
	sorting chan struct{}
}

func newTabletControlService(s *TabletServer) *tabletControlService {
	return &tabletControlService{s: s, sorting: make(chan struct{}, sortSlots)}
}

func decodeTableJSON(b []byte) (meta.Table, error) {
	var t meta.Table
	if err := json.Unmarshal(b, &t); err != nil {
		return meta.Table{}, status.Errorf(codes.InvalidArgument, "table_json: %v", err)
	}
	if t.ID.Table == "" {
		return meta.Table{}, status.Error(codes.InvalidArgument, "table_json: no table id")
	}
	return t, nil
}

func (c *tabletControlService) LoadTablet(ctx context.Context, req *clusterpb.LoadTabletRequest) (*clusterpb.LoadTabletResponse, error) {
	t, err := decodeTableJSON(req.GetTableJson())
	if err != nil {
		return nil, err
	}
	if req.GetTabletId() == "" {
		return nil, status.Error(codes.InvalidArgument, "tablet_id: empty")
	}
	var recover tabletserver.ReplayLog
	if from := req.GetRecoverFrom(); from != "" {
		recover.Log = c.s.logOptions(from)
		if req.GetSortedLog() && recover.Log.Dir == "" {
			recover.Sorted = commitlog.SortedLog{Store: c.s.cfg.Store, Prefix: SortedLogPrefix(from)}
		}
	}
	ref := meta.TabletRef{ID: req.GetTabletId(), Start: req.GetStartKey(), End: req.GetEndKey()}
	if in := c.s.cfg.inProc; in != nil && in.beforeLoad != nil && t.ID != meta.MetadataTable {
		in.beforeLoad(t.ID, ref.ID)
	}
	err = c.s.host.LoadTablet(ctx, t, ref, recover)
	if errors.Is(err, commitlog.ErrNotSorted) {
		// The sorted copy does not cover the log (a segment missing, or
		// written after the sort): the log itself is complete, so
		// replaying it whole is slower but loses nothing.
		c.s.log.Warn("sorted log incomplete; replaying the log itself", "tablet", ref.ID, "err", err)
		recover.Sorted = commitlog.SortedLog{}
		err = c.s.host.LoadTablet(ctx, t, ref, recover)
	}
	if err != nil {
		c.s.log.Warn("load failed", "tablet", ref.ID, "table", t.ID.String(), "err", err)
		return nil, status.Errorf(codes.Internal, "loading tablet %s: %v", ref.ID, err)
	}
	c.s.log.Info("tablet loaded", "tablet", ref.ID, "table", t.ID.String(), "recovered_from", req.GetRecoverFrom(), "sorted_log", recover.Sorted.Store != nil)
	if in := c.s.cfg.inProc; in != nil && in.afterLoad != nil && t.ID != meta.MetadataTable {
		in.afterLoad(t.ID, ref.ID)
	}
	if err := c.catchUpSchema(ctx, t); err != nil {
		return nil, err
	}
	return &clusterpb.LoadTabletResponse{}, nil
}

// catchUpSchema applies the table's schema as the catalog holds it now if
// it is newer than loaded's, the one the master sent with the load. The
// master reads the schema when it plans the assignment; a schema change
// committed after that pushes UpdateSchema to every server, but a server
// still loading the tablet does not serve the table yet and ignores the
// push — so the tablet would keep the old schema (a family created right
// after CreateTable stayed unknown: writes to it NOT_FOUND). Reading the
// catalog after the tablet is in the Host closes the gap: a change
// committed before this read is seen here, one committed after it finds
// the table served and is pushed (Host.UpdateSchema never goes back to an
// older generation, so the two can arrive in either order).
func (c *tabletControlService) catchUpSchema(ctx context.Context, loaded meta.Table) error {
	cur, err := NewCoordCatalog(c.s.cfg.Coord).Get(ctx, loaded.ID)
	if errors.Is(err, meta.ErrTableNotFound) {
		return nil // dropped meanwhile: the drop unloads the tablet
	}
	if err != nil {
		return status.Errorf(codes.Unavailable, "reading the schema of %s after loading: %v", loaded.ID, err)
	}
	if cur.Generation <= loaded.Generation {
		return nil
	}
	if err := c.s.host.UpdateSchema(ctx, cur); err != nil && !errors.Is(err, tabletserver.ErrTableNotFound) {
		return status.Errorf(codes.Internal, "updating the schema of %s after loading: %v", loaded.ID, err)
	}
	return nil
}

// deadLog returns the commit log of server dead and where its sorted copy
// goes, refusing this server's own (live) log.
func (c *tabletControlService) deadLog(dead string) (commitlog.Options, commitlog.SortedLog, error) {
	switch dead {
	case "":
		return commitlog.Options{}, commitlog.SortedLog{}, status.Error(codes.InvalidArgument, "dead_server: empty")
	case c.s.name:
		return commitlog.Options{}, commitlog.SortedLog{}, status.Errorf(codes.FailedPrecondition, "%s is this server, which is alive", dead)
	}
	return c.s.logOptions(dead), commitlog.SortedLog{Store: c.s.cfg.Store, Prefix: SortedLogPrefix(dead)}, nil
}

func (c *tabletControlService) ListLogSegments(ctx context.Context, req *clusterpb.ListLogSegmentsRequest) (*clusterpb.ListLogSegmentsResponse, error) {
	log, _, err := c.deadLog(req.GetDeadServer())
	if err != nil {
		return nil, err
	}
	if log.Dir != "" {
		return nil, status.Errorf(codes.FailedPrecondition, "the log of %s is local files (ServerConfig.LogDir): it is replayed, not sorted", req.GetDeadServer())
	}
	segs, err := commitlog.Segments(ctx, log)
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "listing the log of %s: %v", req.GetDeadServer(), err)
	}
	return &clusterpb.ListLogSegmentsResponse{Segments: segs}, nil
}

// sortSlots bounds the segments a server sorts at once: each holds about
// twice a segment (64 MiB by default) in memory.
const sortSlots = 1

func (c *tabletControlService) SortLogSegment(ctx context.Context, req *clusterpb.SortLogSegmentRequest) (*clusterpb.SortLogSegmentResponse, error) {
	log, sorted, err := c.deadLog(req.GetDeadServer())
	if err != nil {
		return nil, err
	}
	select {
	case c.sorting <- struct{}{}:
		defer func() { <-c.sorting }()
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	start := time.Now()
	st, err := commitlog.SortSegment(ctx, log, req.GetSegment(), sorted)
	switch {
	case err == nil:
	case errors.Is(err, commitlog.ErrCorrupt):
		return nil, status.Errorf(codes.DataLoss, "sorting segment %d of %s: %v", req.GetSegment(), req.GetDeadServer(), err)
	case blob.IsNotExist(err):
		return nil, status.Errorf(codes.NotFound, "sorting segment %d of %s: %v", req.GetSegment(), req.GetDeadServer(), err)
	case ctx.Err() != nil:
		return nil, status.FromContextError(ctx.Err()).Err()
	default:
		return nil, status.Errorf(codes.Unavailable, "sorting segment %d of %s: %v", req.GetSegment(), req.GetDeadServer(), err)
	}
	c.s.log.Info("log segment sorted", "dead", req.GetDeadServer(), "segment", st.Segment, "records", st.Records,
		"tablets", st.Tablets, "bytes", st.SourceBytes, "took", time.Since(start))
	return &clusterpb.SortLogSegmentResponse{Records: int64(st.Records), Tablets: int64(st.Tablets),
		SourceBytes: st.SourceBytes, SortedBytes: st.SortedBytes}, nil
}

func (c *tabletControlService) UnloadTablet(ctx context.Context, req *clusterpb.UnloadTabletRequest) (*clusterpb.UnloadTabletResponse, error) {
	if err := c.s.host.UnloadTablet(ctx, req.GetTabletId()); err != nil {
		return nil, status.Errorf(codes.Internal, "unloading tablet %s: %v", req.GetTabletId(), err)
	}
	c.s.log.Debug("unload request done", "tablet", req.GetTabletId()) // the host logs the unload at Info
	return &clusterpb.UnloadTabletResponse{}, nil
}

func (c *tabletControlService) ListTablets(ctx context.Context, _ *clusterpb.ListTabletsRequest) (*clusterpb.ListTabletsResponse, error) {
	resp := &clusterpb.ListTabletsResponse{ServerId: c.s.name}
	for _, t := range c.s.host.ServedTablets() {
		resp.Tablets = append(resp.Tablets, &clusterpb.ServedTablet{
			Table: t.Table.String(), TabletId: t.ID, StartKey: t.Start, EndKey: t.End, Bytes: t.Bytes,
			Loading: t.Loading, Unloading: t.Unloading, Splitting: t.Splitting, SharesFiles: t.SharesFiles,
		})
	}
	return resp, nil
}

func (c *tabletControlService) UpdateSchema(ctx context.Context, req *clusterpb.UpdateSchemaRequest) (*clusterpb.UpdateSchemaResponse, error) {
	t, err := decodeTableJSON(req.GetTableJson())
	if err != nil {
		return nil, err
	}
	if err := c.s.host.UpdateSchema(ctx, t); err != nil && !errors.Is(err, tabletserver.ErrTableNotFound) {
		return nil, status.Errorf(codes.Internal, "updating the schema of %s: %v", t.ID, err)
	}
	return &clusterpb.UpdateSchemaResponse{}, nil
}

// locatorService is a tablet server's Locator: the entry of clients that
// know no Consul.
type locatorService struct {
	clusterpb.UnimplementedLocatorServer
	kv coord.KV
}

func (l *locatorService) GetRoot(ctx context.Context, _ *clusterpb.GetRootRequest) (*clusterpb.GetRootResponse, error) {
	root, _, err := readRoot(ctx, l.kv)
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "reading the root location: %v", err)
	}
	resp := &clusterpb.GetRootResponse{}
	if root.Server != "" {
		if resp.RootJson, err = json.Marshal(root); err != nil {
			return nil, err
		}
	}
	if e, err := l.kv.Get(ctx, coord.KeyMaster); err == nil && e.Session != "" {
		resp.MasterAddr = string(e.Value)
	}
	return resp, nil
}

// ListGateways lists the address of every tablet server whose key in the
// lock service is held by its session: the servers a client may enter
// through. A released key (a server stopping, or one whose session the
// master ended) is left out.
func (l *locatorService) ListGateways(ctx context.Context, _ *clusterpb.ListGatewaysRequest) (*clusterpb.ListGatewaysResponse, error) {
	entries, err := l.kv.List(ctx, coord.PrefixServers)
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "listing the tablet servers: %v", err)
	}
	resp := &clusterpb.ListGatewaysResponse{}
	for _, e := range entries {
		if _, ok := coord.ServerID(e.Key); !ok || e.Session == "" {
			continue
		}
		if addr := coord.ParseServerRecord(e.Value).Addr; addr != "" {
			resp.Addrs = append(resp.Addrs, addr)
		}
	}
	slices.Sort(resp.Addrs)
	resp.Addrs = slices.Compact(resp.Addrs)
	return resp, nil
}
