package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tabuladb/tabula/storage/cluster/clusterpb"
	"github.com/tabuladb/tabula/storage/master"
	"github.com/tabuladb/tabula/storage/meta"
	"github.com/tabuladb/tabula/storage/tabletdesc"
	"github.com/tabuladb/tabula/storage/tabletserver"
)

// Backups in the cluster: the master flushes a table on every live tablet
// server (TabletControl.FlushTable) and takes the states they return; they
// must cover the table's rows, or a tablet was moving or unassigned and
// the flush is tried again.

var _ master.BackupHost = (*clusterTableHost)(nil)

// flushAttempts and flushBackoff bound FlushTableStates' retries while a
// tablet of the table is between servers.
const (
	flushAttempts = 20
	flushBackoff  = 100 * time.Millisecond
)

// FlushTableStates flushes every tablet of t wherever it is served and
// returns their states in key order, covering every row; UNAVAILABLE if
// some rows stay unserved through the retries.
func (a *clusterTableHost) FlushTableStates(ctx context.Context, t meta.Table) ([]tabletdesc.State, error) {
	b, err := json.Marshal(t)
	if err != nil {
		return nil, err
	}
	var last error
	for attempt := range flushAttempts {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(flushBackoff):
			}
		}
		var states []tabletdesc.State
		err := a.eachServer(ctx, func(ctx context.Context, c clusterpb.TabletControlClient) error {
			resp, err := c.FlushTable(ctx, &clusterpb.FlushTableRequest{TableJson: b})
			if err != nil {
				return err
			}
			for _, sj := range resp.GetStateJson() {
				var st tabletdesc.State
				if err := json.Unmarshal(sj, &st); err != nil {
					return fmt.Errorf("a tablet state: %w", err)
				}
				states = append(states, st)
			}
			return nil
		})
		if err != nil {
			last = err
			continue
		}
		slices.SortFunc(states, func(x, y tabletdesc.State) int { return bytes.Compare(x.Start, y.Start) })
		if err := coverage(states); err != nil {
			last = fmt.Errorf("the tablets of %s: %w", t.ID, err)
			continue
		}
		return states, nil
	}
	return nil, status.Errorf(codes.Unavailable, "flushing %s for a backup: %v", t.ID, last)
}

// coverage checks that states (sorted by start) are adjacent and cover
// every row.
func coverage(states []tabletdesc.State) error {
	var at []byte
	for i, s := range states {
		if !bytes.Equal(s.Start, at) {
			return fmt.Errorf("rows from %q are not served (or served twice)", at)
		}
		if len(s.End) == 0 && i != len(states)-1 {
			return errors.New("tablets overlap at the end of the table")
		}
		at = s.End
	}
	if len(states) == 0 || len(at) != 0 {
		return fmt.Errorf("rows from %q are not served", at)
	}
	return nil
}

// FlushTable flushes the tablets of the table this server holds and
// returns their states.
func (c *tabletControlService) FlushTable(ctx context.Context, req *clusterpb.FlushTableRequest) (*clusterpb.FlushTableResponse, error) {
	t, err := decodeTableJSON(req.GetTableJson())
	if err != nil {
		return nil, err
	}
	states, err := c.s.host.FlushServedTablets(ctx, t)
	if errors.Is(err, tabletserver.ErrTableNotFound) {
		return &clusterpb.FlushTableResponse{}, nil
	}
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "flushing %s: %v", t.ID, err)
	}
	resp := &clusterpb.FlushTableResponse{}
	for _, st := range states {
		b, err := json.Marshal(st)
		if err != nil {
			return nil, err
		}
		resp.StateJson = append(resp.StateJson, b)
	}
	return resp, nil
}
