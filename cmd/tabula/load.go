package main

// `tabula load`: fill a table from a synthetic crawl (webtable) or from a
// directory of real HTML pages (html), through the Cloud Bigtable API.

import (
	"context"
	"fmt"
	"time"

	"cloud.google.com/go/bigtable"
	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tabuladb/tabula/cmd/tabula/internal/webtable"
	"github.com/tabuladb/tabula/storage/cell"
)

func newLoadCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "load",
		Short: "Load data into a table: a synthetic Webtable or a directory of HTML pages",
		// Without this, a bare or misspelt "tabula load x" would print
		// help and exit 0.
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usagef(cmd, "unknown load source %q: want webtable or html", args[0])
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			return usagef(cmd, "missing what to load: webtable or html")
		},
	}
	cmd.AddCommand(newLoadWebtableCommand(), newLoadHTMLCommand())
	return cmd
}

// webtableFamilies is the Webtable's schema: three crawls of contents,
// every anchor and language kept.
func webtableFamilies() map[string]bigtable.Family {
	return map[string]bigtable.Family{
		webtable.FamilyContents: {GCPolicy: bigtable.MaxVersionsPolicy(3)},
		webtable.FamilyAnchor:   {GCPolicy: bigtable.NoGcPolicy()},
		webtable.FamilyLanguage: {GCPolicy: bigtable.NoGcPolicy()},
	}
}

// webtableMetaGroup is the locality group of the small, often-read
// families, in memory as the paper suggests for anchor and language.
const webtableMetaGroup = "meta"

// ensureWebtable creates the table with the Webtable families, anchor and
// language in an in-memory locality group when the server has Tabula's
// extension, or adds the families an existing table lacks, so loading
// into a table made with createtable works too. It reports whether it
// created the table and the locality group.
func ensureWebtable(ctx context.Context, c *conn, table string) (created, grouped bool, err error) {
	fams := webtableFamilies()
	err = c.admin.CreateTableFromConf(ctx, &bigtable.TableConf{TableID: table, ColumnFamilies: map[string]bigtable.Family{
		webtable.FamilyContents: fams[webtable.FamilyContents],
	}})
	switch {
	case err == nil:
		created = true
		// The extension creates missing families inside the group; a
		// family that already sits in the default group could not move.
		grouped, err = setInMemoryGroup(ctx, c, table, webtableMetaGroup, []string{webtable.FamilyAnchor, webtable.FamilyLanguage})
		if err != nil {
			return created, false, err
		}
	case status.Code(err) != codes.AlreadyExists:
		return false, false, fmt.Errorf("create table %s: %w", table, describe(err))
	}
	info, err := c.admin.TableInfo(ctx, table)
	if err != nil {
		return created, grouped, fmt.Errorf("table %s: %w", table, describe(err))
	}
	have := map[string]bool{}
	for _, f := range info.Families {
		have[f] = true
	}
	for _, name := range []string{webtable.FamilyContents, webtable.FamilyAnchor, webtable.FamilyLanguage} {
		if have[name] {
			continue
		}
		if err := c.admin.CreateColumnFamilyWithConfig(ctx, table, name, fams[name]); err != nil {
			return created, grouped, fmt.Errorf("add family %s to %s: %w", name, table, describe(err))
		}
	}
	return created, grouped, nil
}

// schemaNote says how the table was set up, for load summaries.
func schemaNote(created, grouped bool) string {
	switch {
	case !created:
		return "existing table"
	case grouped:
		return "new table, anchor and language in the in-memory locality group " + webtableMetaGroup
	}
	return "new table; the server has no locality-group extension, so all families share the default group"
}

// toBigtable converts an engine row mutation (what the generator builds)
// to the client's; only the kinds the generator uses need to exist here,
// the rest are errors rather than silent drops.
func toBigtable(rm cell.RowMutation) (*bigtable.Mutation, int, error) {
	mut := bigtable.NewMutation()
	size := len(rm.Row)
	for _, m := range rm.Mutations {
		switch m.Kind {
		case cell.SetCell:
			mut.Set(m.Family, string(m.Qualifier), bigtable.Timestamp(m.Timestamp), m.Value)
			size += len(m.Family) + len(m.Qualifier) + len(m.Value) + 8
		case cell.DeleteFromFamily:
			mut.DeleteCellsInFamily(m.Family)
		case cell.DeleteFromRow:
			mut.DeleteRow()
		default:
			return nil, 0, fmt.Errorf("row %q: mutation kind %s not supported by the loader", rm.Row, m.Kind)
		}
	}
	return mut, size, nil
}

// bulkWriter applies batches of row mutations with ApplyBulk and turns
// per-row failures into one error naming the first failed row.
type bulkWriter struct {
	tbl *bigtable.Table
}

func (b bulkWriter) apply(ctx context.Context, keys []string, muts []*bigtable.Mutation) error {
	if len(keys) == 0 {
		return nil
	}
	errs, err := b.tbl.ApplyBulk(ctx, keys, muts)
	if err != nil {
		return describe(err)
	}
	for i, e := range errs {
		if e != nil {
			failed := 0
			for _, e2 := range errs {
				if e2 != nil {
					failed++
				}
			}
			return fmt.Errorf("%d of %d rows failed, first %q: %w", failed, len(keys), keys[i], describe(e))
		}
	}
	return nil
}

// rate formats a throughput summary.
func rate(rows int64, bytes int64, d time.Duration) string {
	secs := d.Seconds()
	if secs <= 0 {
		secs = 1e-9
	}
	return fmt.Sprintf("%.0f rows/s, %.2f MB/s", float64(rows)/secs, float64(bytes)/1e6/secs)
}

// errFirst keeps the first error of concurrent workers.
type errFirst struct {
	ch chan error
}

func newErrFirst() errFirst { return errFirst{ch: make(chan error, 1)} }

func (e errFirst) set(err error) {
	select {
	case e.ch <- err:
	default:
	}
}

func (e errFirst) get() error {
	select {
	case err := <-e.ch:
		return err
	default:
		return nil
	}
}
