package jobs

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"reflect"
	"time"

	"cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/x/beamx"

	"github.com/tabuladb/tabula/beamio"
	"github.com/tabuladb/tabula/pipelines/internal/pipe"
	"github.com/tabuladb/tabula/storage/cell"
)

// The Webtable's anchor family, and the output's family and columns.
const (
	FamilyAnchor  = "anchor"
	FamilyCount   = "count"
	ColumnPages   = "pages"
	ColumnAnchors = "anchors"
)

// DomainCountConfig is a count of pages and anchors per domain over a
// Webtable (rows keyed by reversed URL, com.cnn.www/path, with one
// anchor:<referring site> column per inbound link).
type DomainCountConfig struct {
	// Read selects the Webtable's rows (Families and Filter are set by
	// the job: it reads anchor columns, newest version, without values).
	Read beamio.ReadConfig
	// Out is the table the counts go to, on Read's server unless OutConn
	// is set; created with family "count" when missing.
	OutConn *pipe.Conn
	Out     string
	// Timestamp of every cell written, microseconds; default now (to the
	// millisecond). Fixed for the run, so that a re-run bundle writes the
	// same cells.
	Timestamp int64
	Write     beamio.WriteConfig
}

// Domain returns the domain of a Webtable row key: the reversed host,
// everything before the first '/' ("com.cnn.www" of
// "com.cnn.www/sports/3").
func Domain(key []byte) string {
	if i := bytes.IndexByte(key, '/'); i >= 0 {
		return string(key[:i])
	}
	return string(key)
}

// DomainCounts is one domain's count: its pages (rows) and the anchors
// (anchor columns) pointing at them.
type DomainCounts struct {
	Pages, Anchors int64
}

// CountRow returns the domain of a Webtable row and its counts.
func CountRow(r cell.Row) (string, DomainCounts) {
	c := DomainCounts{Pages: 1}
	for _, cl := range r.Cells {
		if cl.Family == FamilyAnchor {
			c.Anchors++
		}
	}
	return Domain(r.Key), c
}

// EncodeCount is the cell value of a count: a big-endian int64, as
// Bigtable's increments keep counters.
func EncodeCount(n int64) []byte {
	return binary.BigEndian.AppendUint64(nil, uint64(n))
}

// DomainCount runs the count and writes one row per domain to Out:
// count:pages and count:anchors.
func DomainCount(ctx context.Context, cfg DomainCountConfig) (domains int64, err error) {
	if cfg.Out == "" {
		return 0, pipe.Usagef("--out-table is required")
	}
	if _, err := pipe.CheckTable(ctx, cfg.Read.Table); err != nil {
		return 0, err
	}
	outConn := pipe.Conn{Addr: cfg.Read.Table.Addr, Project: cfg.Read.Table.Project, Instance: cfg.Read.Table.Instance, Auth: cfg.Read.Table.Auth}
	if cfg.OutConn != nil {
		outConn = *cfg.OutConn
	}
	if err := pipe.EnsureFamilies(ctx, outConn, cfg.Out, []string{FamilyCount}, true, ""); err != nil {
		return 0, err
	}
	if cfg.Timestamp == 0 {
		cfg.Timestamp = time.Now().UnixMilli() * 1000
	}
	// Anchor columns, newest version, no values: a page is counted by
	// its row, which the anchors or the stripped other cells keep.
	read := cfg.Read
	read.Families = nil
	read.Filter = &bigtablepb.RowFilter{Filter: &bigtablepb.RowFilter_Chain_{Chain: &bigtablepb.RowFilter_Chain{Filters: []*bigtablepb.RowFilter{
		{Filter: &bigtablepb.RowFilter_CellsPerColumnLimitFilter{CellsPerColumnLimitFilter: 1}},
		{Filter: &bigtablepb.RowFilter_StripValueTransformer{StripValueTransformer: true}},
	}}}}
	wcfg := cfg.Write
	wcfg.Table = outConn.Table(cfg.Out)

	p, s := beam.NewPipelineWithRoot()
	rows, err := beamio.TryRead(s, read)
	if err != nil {
		return 0, pipe.UsageError{Err: err}
	}
	counts := beam.CombinePerKey(s, addCounts, beam.ParDo(s, countRow, rows))
	muts := beam.ParDo(s, &countMutationFn{Timestamp: cfg.Timestamp}, counts)
	_, dead, err := beamio.TryWrite(s, wcfg, muts)
	if err != nil {
		return 0, pipe.UsageError{Err: err}
	}
	beam.ParDo0(s, logDeadLetter, beam.Reshuffle(s, dead)) // a shuffle: see prismSpin
	pr, err := beamx.RunWithMetrics(ctx, p)
	if err != nil {
		return 0, fmt.Errorf("domaincount: %w", err)
	}
	if n := counter(pr, "dead_letters"); n > 0 {
		return 0, fmt.Errorf("domaincount: the server refused %d of the counts (printed above)", n)
	}
	return pipe.Counter(pr, "write_entries"), nil
}

func countRow(r beamio.Row) (string, DomainCounts) { return CountRow(cell.Row(r)) }

func addCounts(a, b DomainCounts) DomainCounts {
	return DomainCounts{Pages: a.Pages + b.Pages, Anchors: a.Anchors + b.Anchors}
}

// countMutationFn writes a domain's counts at the job's timestamp.
type countMutationFn struct{ Timestamp int64 }

func (f *countMutationFn) ProcessElement(domain string, c DomainCounts) beamio.RowMutation {
	return beamio.RowMutation{Row: []byte(domain), Mutations: []cell.Mutation{
		cell.Set(FamilyCount, []byte(ColumnPages), f.Timestamp, EncodeCount(c.Pages)),
		cell.Set(FamilyCount, []byte(ColumnAnchors), f.Timestamp, EncodeCount(c.Anchors)),
	}}
}

func init() {
	register.Function1x2(countRow)
	register.Function2x1(addCounts)
	register.DoFn2x1[string, DomainCounts, beamio.RowMutation](&countMutationFn{})
	beam.RegisterType(reflect.TypeOf((*DomainCounts)(nil)).Elem())
}
