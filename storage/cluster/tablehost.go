package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/client"
	"github.com/tabuladb/tabula/storage/cluster/clusterpb"
	"github.com/tabuladb/tabula/storage/coord"
	"github.com/tabuladb/tabula/storage/master"
	"github.com/tabuladb/tabula/storage/meta"
)

// clusterTableHost is the admin API's master.TableHost in a cluster: a new
// table becomes METADATA rows of unassigned tablets (the assignment loop
// assigns them), a dropped one loses its rows and is unloaded, schema
// changes and row-range drops go to every live server.
type clusterTableHost struct {
	kv      coord.KV
	catalog meta.Catalog
	md      *metadataStore
	servers *serverClient
	// poke asks the assignment loop for a round now (master.Loop.Poke);
	// nil: the tablets wait for the next tick.
	poke func()
}

var (
	_ master.TableHost     = (*clusterTableHost)(nil)
	_ master.ServingWaiter = (*clusterTableHost)(nil)
)

// Pacing of clusterTableHost.WaitServing: METADATA is read again after a
// pause doubling from servingPollFirst to servingPollMax, and the
// assignment loop is poked every servingPokeEvery (a round already under
// way may have read METADATA before the table's rows were written).
const (
	servingPollFirst = 2 * time.Millisecond
	servingPollMax   = 50 * time.Millisecond
	servingPokeEvery = 500 * time.Millisecond
)

// WaitServing returns once METADATA names a server for every tablet of t
// (master.ServingWaiter): the master records a tablet's location only after
// its server has loaded it (master's term.load), so every row of the table
// is then served and every client's lookup finds its server. It asks the
// assignment loop for a round at once, so that a new table waits for its
// loads, not for the loop's tick. It returns ctx's error, with how many
// tablets were still unserved, when ctx ends first.
func (a *clusterTableHost) WaitServing(ctx context.Context, t meta.Table) error {
	pause := servingPollFirst
	var lastPoke time.Time
	for {
		if a.poke != nil && time.Since(lastPoke) >= servingPokeEvery {
			a.poke()
			lastPoke = time.Now()
		}
		rows, err := a.md.tableRows(ctx, t.ID)
		if err == nil && locationsServed(rows) {
			return nil
		}
		select {
		case <-ctx.Done():
			if err != nil {
				return fmt.Errorf("%w (reading METADATA: %v)", ctx.Err(), err)
			}
			return fmt.Errorf("%w: %s", ctx.Err(), describeUnserved(rows))
		case <-time.After(pause):
		}
		pause = min(2*pause, servingPollMax)
	}
}

// locationsServed reports whether rows, a table's METADATA rows in key
// order, cover all its rows and each names a server.
func locationsServed(rows []meta.Location) bool {
	if !locationsCover(rows) {
		return false
	}
	for _, l := range rows {
		if l.Server == "" {
			return false
		}
	}
	return true
}

// describeUnserved says which of rows name no server, for an error.
func describeUnserved(rows []meta.Location) string {
	if !locationsCover(rows) {
		return fmt.Sprintf("its %d METADATA rows do not cover the table", len(rows))
	}
	n, first := 0, -1
	for i, l := range rows {
		if l.Server == "" {
			if first < 0 {
				first = i
			}
			n++
		}
	}
	if n == 0 {
		return "every tablet is served"
	}
	l := rows[first]
	return fmt.Sprintf("%d of %d tablets not yet loaded by a tablet server (the first: %s [%q, %q))", n, len(rows), l.TabletID, l.Start, l.End)
}

func (a *clusterTableHost) OpenTable(ctx context.Context, t meta.Table) error {
	rows, err := a.md.tableRows(ctx, t.ID)
	if err != nil {
		return status.Errorf(codes.Unavailable, "reading METADATA: %v", err)
	}
	if locationsCover(rows) {
		return a.UpdateSchema(ctx, t)
	}
	// A new table, or one whose creation was cut short (the master
	// repairing it may write the same rows now): the rows its tablets
	// lack, each only if absent (planRepair, as repairTables).
	p := planRepair(t, rows, refTablets(t))
	p.Finish = false // the creator clears Restoring itself
	if err := applyRepair(ctx, a.catalog, a.md, p); err != nil {
		return status.Errorf(codes.Unavailable, "writing METADATA: %v", err)
	}
	return nil
}

func (a *clusterTableHost) DropTable(ctx context.Context, t meta.Table) error {
	if err := a.deleteRows(ctx, t.ID); err != nil {
		return err
	}
	// The rows are gone, so the assignment loop no longer assigns the
	// tablets; unload them where they are served. A split these unloads
	// meet under way commits its children's rows just after (it read
	// its parent's row before the rows went): those rows go in a second
	// pass. What is still served after (a server unreachable now, a load
	// landing later) the master unloads as an orphan
	// (master.LoopOptions.OrphanAfter).
	unloadErr := a.eachServer(ctx, func(ctx context.Context, c clusterpb.TabletControlClient) error {
		resp, err := c.ListTablets(ctx, &clusterpb.ListTabletsRequest{})
		if err != nil {
			return err
		}
		for _, st := range resp.GetTablets() {
			if st.GetTable() != t.ID.String() {
				continue
			}
			if _, err := c.UnloadTablet(ctx, &clusterpb.UnloadTabletRequest{TabletId: st.GetTabletId()}); err != nil {
				return err
			}
		}
		return nil
	})
	deleteErr := a.deleteRows(ctx, t.ID)
	if unloadErr != nil {
		return unloadErr
	}
	return deleteErr
}

// deleteRows deletes every METADATA row of table.
func (a *clusterTableHost) deleteRows(ctx context.Context, table meta.TableID) error {
	rows, err := a.md.tableRows(ctx, table)
	if err != nil {
		return status.Errorf(codes.Unavailable, "reading METADATA: %v", err)
	}
	for _, l := range rows {
		if err := a.md.cl.Apply(ctx, meta.MetadataTableName, cell.RowMutation{Row: l.MetadataKey(), Mutations: []cell.Mutation{cell.DeleteRow()}}); err != nil {
			return status.Errorf(codes.Unavailable, "writing METADATA: %v", err)
		}
	}
	return nil
}

var _ master.DroppedTabletsHost = (*clusterTableHost)(nil)

// TabletsDropped reports whether METADATA has no row of t: its tablets
// were dropped (a master killed during DeleteTable leaves the catalog
// entry). It reads at most one row: the GC rounds ask it of every table
// (master.AdminService.FinishDeletions).
func (a *clusterTableHost) TabletsDropped(ctx context.Context, t meta.Table) (bool, error) {
	found, err := a.md.hasRows(ctx, t.ID)
	if err != nil {
		return false, status.Errorf(codes.Unavailable, "reading METADATA: %v", err)
	}
	return !found, nil
}

func (a *clusterTableHost) UpdateSchema(ctx context.Context, t meta.Table) error {
	b, err := json.Marshal(t)
	if err != nil {
		return err
	}
	return a.eachServer(ctx, func(ctx context.Context, c clusterpb.TabletControlClient) error {
		_, err := c.UpdateSchema(ctx, &clusterpb.UpdateSchemaRequest{TableJson: b})
		return err
	})
}

// DropRowRange deletes the rows through the cluster's data path, so
// every tablet of the range is reached wherever it is served (also one
// moving meanwhile: the client follows it).
func (a *clusterTableHost) DropRowRange(ctx context.Context, t meta.Table, prefix []byte) error {
	name := t.ID.FullName("-")
	for {
		s := a.md.cl.Scan(ctx, name, client.ScanOptions{Prefix: prefix, MaxVersions: 1, ColumnRegex: "", Limit: dropBatch})
		var keys [][]byte
		for s.Next() {
			keys = append(keys, s.Row().Key)
		}
		s.Close()
		if err := s.Err(); err != nil {
			return status.Errorf(codes.Unavailable, "scanning %s: %v", t.ID, err)
		}
		for _, k := range keys {
			if err := a.md.cl.Apply(ctx, name, cell.RowMutation{Row: k, Mutations: []cell.Mutation{cell.DeleteRow()}}); err != nil {
				return status.Errorf(codes.Unavailable, "deleting row %q of %s: %v", k, t.ID, err)
			}
		}
		if len(keys) < dropBatch {
			return nil
		}
	}
}

// dropBatch is how many rows DropRowRange reads before deleting them.
const dropBatch = 1000

// eachServer calls fn for every live tablet server (a key under servers/
// held by a session) and joins the errors.
func (a *clusterTableHost) eachServer(ctx context.Context, fn func(context.Context, clusterpb.TabletControlClient) error) error {
	names, err := liveServers(ctx, a.kv)
	if err != nil {
		return status.Errorf(codes.Unavailable, "listing tablet servers: %v", err)
	}
	var errs []error
	for _, name := range names {
		c, err := a.servers.tabletControl(name)
		if err == nil {
			err = fn(ctx, c)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("tablet server %s: %w", name, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return status.Errorf(codes.Unavailable, "%v", err)
	}
	return nil
}

// liveServers returns the names of the servers whose key under servers/ is
// locked by a session.
func liveServers(ctx context.Context, kv coord.KV) ([]string, error) {
	ents, err := kv.List(ctx, coord.PrefixServers)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		if id, ok := coord.ServerID(e.Key); ok && e.Session != "" {
			out = append(out, id)
		}
	}
	return out, nil
}
