package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/tabuladb/tabula/storage/cluster/clusterpb"
	"github.com/tabuladb/tabula/storage/master"
	"github.com/tabuladb/tabula/storage/master/assign"
	"github.com/tabuladb/tabula/storage/meta"
)

// serverClient is master.TabletServers over gRPC: each server is reached at
// meta.ServerAddr of its name; Load sends the table's catalog entry along,
// so servers need no catalog.
type serverClient struct {
	conns   *conns
	catalog meta.Catalog
}

func (s *serverClient) control(server string) (clusterpb.TabletControlClient, error) {
	cc, err := s.conns.get(meta.ServerAddr(server))
	if err != nil {
		return nil, err
	}
	return clusterpb.NewTabletControlClient(cc), nil
}

func (s *serverClient) List(ctx context.Context, server string) ([]assign.Served, error) {
	c, err := s.control(server)
	if err != nil {
		return nil, err
	}
	resp, err := c.ListTablets(ctx, &clusterpb.ListTabletsRequest{})
	if err != nil {
		return nil, err
	}
	if resp.GetServerId() != server {
		// Another process now listens on the address: the named server is
		// gone and serves nothing.
		return nil, fmt.Errorf("cluster: %s answers as %s", server, resp.GetServerId())
	}
	out := make([]assign.Served, 0, len(resp.GetTablets()))
	for _, t := range resp.GetTablets() {
		out = append(out, assign.Served{ID: assign.TabletID(t.GetTabletId()), Table: t.GetTable(), Start: string(t.GetStartKey()), End: string(t.GetEndKey()), Bytes: t.GetBytes(), Splitting: t.GetSplitting()})
	}
	return out, nil
}

// tableEntry returns the catalog entry of table (meta.TableID.String form).
func (s *serverClient) tableEntry(ctx context.Context, table string) (meta.Table, error) {
	id, err := parseTableString(table)
	if err != nil {
		return meta.Table{}, err
	}
	if id == meta.MetadataTable {
		return metadataTable(), nil
	}
	return s.catalog.Get(ctx, id)
}

func (s *serverClient) Load(ctx context.Context, server string, t assign.Tablet, rec master.Recovery) error {
	entry, err := s.tableEntry(ctx, t.Table)
	if err != nil {
		return err
	}
	b, err := json.Marshal(entry)
	if err != nil {
		return err
	}
	c, err := s.control(server)
	if err != nil {
		return err
	}
	_, err = c.LoadTablet(ctx, &clusterpb.LoadTabletRequest{TableJson: b, TabletId: string(t.ID), StartKey: []byte(t.Start), EndKey: []byte(t.End), RecoverFrom: rec.From})
	return err
}

// SortLog is not built yet: the master then recovers from the unsorted log.
func (s *serverClient) SortLog(ctx context.Context, dead string, sorters []string) error {
	return errors.New("cluster: log sorting is not implemented")
}

func (s *serverClient) Unload(ctx context.Context, server, tabletID string) error {
	c, err := s.control(server)
	if err != nil {
		return err
	}
	_, err = c.UnloadTablet(ctx, &clusterpb.UnloadTabletRequest{TabletId: tabletID})
	return err
}
