package cluster

import (
	"context"
	"encoding/json"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tabuladb/tabula/storage/cluster/clusterpb"
	"github.com/tabuladb/tabula/storage/commitlog"
	"github.com/tabuladb/tabula/storage/coord"
	"github.com/tabuladb/tabula/storage/meta"
	"github.com/tabuladb/tabula/storage/tabletserver"
)

// controlService is a tablet server's TabletControl: the master's requests.
type controlService struct {
	clusterpb.UnimplementedTabletControlServer
	s *TabletServer
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

func (c *controlService) LoadTablet(ctx context.Context, req *clusterpb.LoadTabletRequest) (*clusterpb.LoadTabletResponse, error) {
	t, err := decodeTableJSON(req.GetTableJson())
	if err != nil {
		return nil, err
	}
	if req.GetTabletId() == "" {
		return nil, status.Error(codes.InvalidArgument, "tablet_id: empty")
	}
	var recover commitlog.Options
	if from := req.GetRecoverFrom(); from != "" {
		recover = commitlog.Options{Store: c.s.cfg.Store, Prefix: LogPrefix(from)}
	}
	ref := meta.TabletRef{ID: req.GetTabletId(), Start: req.GetStartKey(), End: req.GetEndKey()}
	if err := c.s.host.LoadTablet(ctx, t, ref, recover); err != nil {
		c.s.log.Warn("load failed", "tablet", ref.ID, "table", t.ID.String(), "err", err)
		return nil, status.Errorf(codes.Internal, "loading tablet %s: %v", ref.ID, err)
	}
	c.s.log.Info("tablet loaded", "tablet", ref.ID, "table", t.ID.String(), "recovered_from", req.GetRecoverFrom())
	return &clusterpb.LoadTabletResponse{}, nil
}

func (c *controlService) UnloadTablet(ctx context.Context, req *clusterpb.UnloadTabletRequest) (*clusterpb.UnloadTabletResponse, error) {
	if err := c.s.host.UnloadTablet(ctx, req.GetTabletId()); err != nil {
		return nil, status.Errorf(codes.Internal, "unloading tablet %s: %v", req.GetTabletId(), err)
	}
	c.s.log.Info("tablet unloaded", "tablet", req.GetTabletId())
	return &clusterpb.UnloadTabletResponse{}, nil
}

func (c *controlService) ListTablets(ctx context.Context, _ *clusterpb.ListTabletsRequest) (*clusterpb.ListTabletsResponse, error) {
	resp := &clusterpb.ListTabletsResponse{ServerId: c.s.name}
	for _, t := range c.s.host.ServedTablets() {
		resp.Tablets = append(resp.Tablets, &clusterpb.ServedTablet{
			Table: t.Table.String(), TabletId: t.ID, StartKey: t.Start, EndKey: t.End, Bytes: t.Bytes,
			Loading: t.Loading, Unloading: t.Unloading, Splitting: t.Splitting,
		})
	}
	return resp, nil
}

func (c *controlService) UpdateSchema(ctx context.Context, req *clusterpb.UpdateSchemaRequest) (*clusterpb.UpdateSchemaResponse, error) {
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
