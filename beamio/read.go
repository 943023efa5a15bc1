package beamio

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"reflect"
	"sort"
	"strings"
	"sync"
	"time"

	"cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/tabuladb/tabula/beamio/keyrange"
	"github.com/tabuladb/tabula/scripts"
	"github.com/tabuladb/tabula/security/tlsconfig"
	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/client"
	"github.com/tabuladb/tabula/storage/tabletserver/tabletpb"
)

// Table names a table on a Tabula server (tabula dev, or any tablet
// server of a cluster).
type Table struct {
	// Addr is the server's host:port. Required.
	Addr string
	// Project and Instance qualify the table's name; default "tabula"
	// and "dev", as the CLI's.
	Project, Instance string
	// Table is the table ID. Required.
	Table string
	// Auth is how the pipeline's workers authenticate to the server; the
	// zero value takes the workers' environment.
	Auth Credentials
}

// Credentials are how a pipeline reaches a server with TLS and
// authentication on: the pipeline reads and writes as the token's (or the
// client certificate's) principal, with that principal's grants. Each
// unset part falls back to the workers' environment, as client.Dial does:
// TABULA_TLS_CA, TABULA_TLS_CERT and TABULA_TLS_KEY for TLS, TABULA_TOKEN
// for the token; with nothing set, plaintext without credentials.
type Credentials struct {
	// CAFile verifies the server's certificate (TLS on); CertFile and
	// KeyFile are a client certificate, for servers that require one.
	// Paths as the workers see them.
	CAFile, CertFile, KeyFile string
	// Token is a bearer token (a JWT, or a token of the servers' token
	// file). It travels in the pipeline's serialized graph, which a
	// shared runner may show; TokenFile, a file on the workers, keeps it
	// out (its content, trimmed, is the token).
	Token, TokenFile string
}

// ClientOptions returns the client options of c: TLS from the files
// (nil when none is named: client.Dial then reads the environment), and
// the token or the token file's ("" when neither: client.Dial reads
// TABULA_TOKEN). It fails when a file does not load, or when both Token
// and TokenFile are set.
func (c Credentials) ClientOptions() (client.Options, error) {
	var opts client.Options
	if c.CAFile != "" || c.CertFile != "" || c.KeyFile != "" {
		tc, err := tlsconfig.Client(tlsconfig.Files{CAFile: c.CAFile, CertFile: c.CertFile, KeyFile: c.KeyFile})
		if err != nil {
			return opts, fmt.Errorf("beamio: TLS: %w", err)
		}
		opts.TLS = tc
	}
	opts.Token = c.Token
	if c.TokenFile != "" {
		if c.Token != "" {
			return opts, errors.New("beamio: Credentials: set Token or TokenFile, not both")
		}
		b, err := os.ReadFile(c.TokenFile)
		if err != nil {
			return opts, fmt.Errorf("beamio: token file: %w", err)
		}
		if opts.Token = strings.TrimSpace(string(b)); opts.Token == "" {
			return opts, fmt.Errorf("beamio: token file %s is empty", c.TokenFile)
		}
	}
	return opts, nil
}

func (t Table) validate() error {
	if t.Addr == "" {
		return errors.New("beamio: the server address (Addr) is required")
	}
	if t.Table == "" {
		return errors.New("beamio: the table (Table) is required")
	}
	return nil
}

// Dial connects Tabula's client to the table's server with the table's
// credentials (Auth).
func (t Table) Dial() (*client.Client, error) { return t.dial(false) }

// dialReusing is Dial with a client whose scans reuse their buffers
// (client.Options.ReuseScanBuffers).
func (t Table) dialReusing() (*client.Client, error) { return t.dial(true) }

func (t Table) dial(reuseScanBuffers bool) (*client.Client, error) {
	opts, err := t.Auth.ClientOptions()
	if err != nil {
		return nil, err
	}
	opts.Project, opts.Instance = t.Project, t.Instance
	opts.ReuseScanBuffers = reuseScanBuffers
	return client.Dial(t.Addr, opts)
}

// RowRange is the rows [Start, End); an empty End is the end of the
// table.
type RowRange struct {
	Start, End []byte
}

// ReadConfig says what Read reads. The zero value of each selection
// reads everything.
type ReadConfig struct {
	Table
	// Ranges and Prefixes select rows: a row is read when it lies in one
	// of the Ranges or starts with one of the Prefixes (both empty: the
	// whole table). Overlapping selections read each row once.
	Ranges   []RowRange
	Prefixes [][]byte
	// Families keeps only the cells of these families.
	Families []string
	// StartTime and EndTime keep only cells with timestamps in
	// [StartTime, EndTime), microseconds; EndTime 0 is unbounded.
	StartTime, EndTime int64
	// Filter is a Bigtable RowFilter applied, in the server, after the
	// selections above; rows left without cells are not read.
	Filter *bigtablepb.RowFilter
	// Script, when set, is the source of a filter script (package
	// scripts: one that emits to keep) run inside the tablet servers
	// over the selected cells: only the rows it keeps cross the network.
	// ScriptName names it in errors.
	Script, ScriptName string
	// BundleBytes is the size the initial restrictions are cut to (each
	// tablet at least one); default 64 MiB. The runner may split them
	// further while they run.
	BundleBytes int64
}

// DefaultBundleBytes is ReadConfig.BundleBytes's default.
const DefaultBundleBytes = 64 << 20

// readSpec is a ReadConfig as the DoFn carries it through the pipeline
// (Beam serializes DoFns as JSON: the filter travels as bytes).
type readSpec struct {
	Table       Table
	Ranges      []keyrange.Restriction
	Families    []string
	StartTime   int64
	EndTime     int64
	Filter      []byte
	Script      string
	ScriptName  string
	BundleBytes int64
}

// ranges returns cfg's row selection as sorted, merged restrictions.
func (cfg ReadConfig) ranges() ([]keyrange.Restriction, error) {
	var rs []keyrange.Restriction
	for i, r := range cfg.Ranges {
		kr := keyrange.Restriction{Start: r.Start, End: r.End}
		if kr.Empty() {
			return nil, fmt.Errorf("beamio: Ranges[%d]: start %q is not before end %q", i, r.Start, r.End)
		}
		rs = append(rs, kr)
	}
	for i, p := range cfg.Prefixes {
		if len(p) == 0 {
			return nil, fmt.Errorf("beamio: Prefixes[%d] is empty (leave Prefixes and Ranges empty to read the whole table)", i)
		}
		rs = append(rs, keyrange.Restriction{Start: p, End: cell.PrefixSuccessor(p)})
	}
	if len(rs) == 0 {
		return []keyrange.Restriction{{}}, nil
	}
	sort.Slice(rs, func(i, j int) bool { return bytes.Compare(rs[i].Start, rs[j].Start) < 0 })
	out := rs[:1]
	for _, r := range rs[1:] {
		last := &out[len(out)-1]
		if last.Unbounded() || bytes.Compare(r.Start, last.End) <= 0 {
			if r.Unbounded() || !last.Unbounded() && bytes.Compare(r.End, last.End) > 0 {
				last.End = r.End
			}
			continue
		}
		out = append(out, r)
	}
	return out, nil
}

func (cfg ReadConfig) spec() (readSpec, error) {
	if err := cfg.Table.validate(); err != nil {
		return readSpec{}, err
	}
	rs, err := cfg.ranges()
	if err != nil {
		return readSpec{}, err
	}
	if cfg.EndTime != 0 && cfg.EndTime <= cfg.StartTime {
		return readSpec{}, fmt.Errorf("beamio: EndTime %d is not after StartTime %d", cfg.EndTime, cfg.StartTime)
	}
	sp := readSpec{Table: cfg.Table, Ranges: rs, Families: cfg.Families, StartTime: cfg.StartTime, EndTime: cfg.EndTime,
		Script: cfg.Script, ScriptName: cfg.ScriptName, BundleBytes: cfg.BundleBytes}
	if sp.BundleBytes <= 0 {
		sp.BundleBytes = DefaultBundleBytes
	}
	if cfg.Filter != nil {
		if sp.Filter, err = proto.Marshal(cfg.Filter); err != nil {
			return readSpec{}, fmt.Errorf("beamio: Filter: %w", err)
		}
	}
	if cfg.Script != "" {
		name := cfg.ScriptName
		if name == "" {
			name = "script"
		}
		prog, err := scripts.Compile(name, cfg.Script)
		if err != nil {
			return readSpec{}, err
		}
		if !prog.IsFilter() {
			return readSpec{}, fmt.Errorf("beamio: %s is not a filter script: it never emits to keep", name)
		}
	}
	return sp, nil
}

// Read reads the rows cfg selects as a PCollection of Row, in parallel
// over the table's tablets; see the package doc. A bad configuration
// panics, as beam.ParDo does; TryRead returns the error instead. Errors
// reaching the server (a missing table, say) fail the pipeline when it
// runs.
func Read(s beam.Scope, cfg ReadConfig) beam.PCollection {
	out, err := TryRead(s, cfg)
	if err != nil {
		panic(err)
	}
	return out
}

// TryRead is Read returning the configuration's error.
func TryRead(s beam.Scope, cfg ReadConfig) (beam.PCollection, error) {
	sp, err := cfg.spec()
	if err != nil {
		return beam.PCollection{}, err
	}
	s = s.Scope("beamio.Read(" + cfg.Table.Table + ")")
	imp := beam.Impulse(s)
	outs, err := beam.TryParDo(s, &readFn{Spec: sp}, imp)
	if err != nil {
		return beam.PCollection{}, err
	}
	return outs[0], nil
}

// The read's metrics, in namespace "beamio".
var (
	rowsRead       = beam.NewCounter("beamio", "read_rows")
	cellsRead      = beam.NewCounter("beamio", "read_cells")
	readSplits     = beam.NewCounter("beamio", "read_dynamic_splits")
	readRestarts   = beam.NewCounter("beamio", "read_script_restarts")
	readRestricted = beam.NewCounter("beamio", "read_restrictions")
)

// readFn is the splittable DoFn of Read: its element is the impulse, its
// restriction a key range.
type readFn struct {
	Spec readSpec

	mu sync.Mutex
	c  *client.Client
}

func init() {
	register.DoFn4x1[context.Context, *keyrange.Tracker, []byte, func(Row), error](&readFn{})
	register.Emitter1[Row]()
	beam.RegisterType(reflect.TypeOf((*readFn)(nil)).Elem())
}

// client returns the connection, taking the process's shared one
// (sharedClients) on first use (the SDF's restriction methods may run on
// an instance whose Setup did not).
func (f *readFn) client() (*client.Client, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.c == nil {
		c, err := sharedClients.acquire(f.Spec.Table)
		if err != nil {
			return nil, err
		}
		f.c = c
	}
	return f.c, nil
}

// Setup connects to the server.
func (f *readFn) Setup() error {
	_, err := f.client()
	return err
}

// Teardown gives the connection back to the pool, which closes it once
// no DoFn has used it for a while.
func (f *readFn) Teardown() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.c != nil {
		sharedClients.release(f.Spec.Table, f.c)
		f.c = nil
	}
	return nil
}

// CreateInitialRestriction is the hull of the selected ranges.
func (f *readFn) CreateInitialRestriction(_ []byte) keyrange.Restriction {
	rs := f.Spec.Ranges
	return keyrange.Restriction{Start: rs[0].Start, End: rs[len(rs)-1].End}
}

// SplitRestriction cuts the selected ranges within rest at the table's
// tablets and samples (PlanSplits).
func (f *readFn) SplitRestriction(_ []byte, rest keyrange.Restriction) ([]keyrange.Restriction, error) {
	c, err := f.client()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	return f.Spec.plan(ctx, c, rest, f.Spec.BundleBytes)
}

// plan returns the initial restrictions of the selected ranges within
// rest, cut at the table's tablets and samples to about target bytes.
func (sp readSpec) plan(ctx context.Context, c *client.Client, rest keyrange.Restriction, target int64) ([]keyrange.Restriction, error) {
	table := sp.Table.Table
	// The two listings are independent round trips (the samples are the
	// slower: the servers weigh their files' blocks): ask at once.
	var samples []client.RowSample
	var sampleErr error
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		samples, sampleErr = c.SampleRowKeys(ctx, table)
	}()
	tabs, err := c.Tablets(ctx, table)
	<-sampled
	if err != nil {
		return nil, fmt.Errorf("beamio: tablets of %s at %s: %w", table, sp.Table.Addr, err)
	}
	if sampleErr != nil {
		return nil, fmt.Errorf("beamio: SampleRowKeys of %s at %s: %w", table, sp.Table.Addr, sampleErr)
	}
	tablets := make([]Tablet, len(tabs))
	for i, t := range tabs {
		tablets[i] = Tablet{Start: t.Start, End: t.End}
	}
	smp := make([]Sample, len(samples))
	for i, s := range samples {
		smp[i] = Sample{Key: s.Key, Offset: s.Offset}
	}
	var ranges []keyrange.Restriction
	for _, r := range sp.Ranges {
		if in, ok := intersect(r, rest); ok {
			ranges = append(ranges, in)
		}
	}
	return PlanSplits(ranges, tablets, smp, target), nil
}

// Plan returns the key ranges Read would start from: the selected rows
// cut at the tablets and, within them, at sampled keys to about target
// bytes (target <= 0: one per tablet), each with its estimated Bytes, in
// key order. Writers that need contiguous key ranges of their own (one
// file per range, say) group them and read each with Scan.
func (cfg ReadConfig) Plan(ctx context.Context, target int64) ([]keyrange.Restriction, error) {
	sp, err := cfg.spec()
	if err != nil {
		return nil, err
	}
	c, err := sp.Table.Dial()
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return sp.plan(ctx, c, keyrange.Restriction{}, target)
}

// Selection returns the rows cfg selects as sorted, merged key ranges
// (one unbounded range when cfg selects the whole table), or cfg's
// error. PlanSplits of the selection over the table's tablets and
// samples is what Plan returns; a caller that has fetched those (with a
// client of its own) plans without Plan's round trips.
func (cfg ReadConfig) Selection() ([]keyrange.Restriction, error) {
	sp, err := cfg.spec()
	if err != nil {
		return nil, err
	}
	return sp.Ranges, nil
}

// Scan reads the rows of r that cfg selects (families, times, filter,
// script; r should lie within cfg's ranges) in key order, straight from
// the servers as Read does, and calls fn with each until fn returns
// false. c is a client of cfg's server.
func (cfg ReadConfig) Scan(ctx context.Context, c *client.Client, r keyrange.Restriction, fn func(cell.Row) bool) error {
	sp, err := cfg.spec()
	if err != nil {
		return err
	}
	_, err = sp.scan(ctx, c, r, fn)
	return err
}

// RestrictionSize is the restriction's estimated bytes (at least 1, so
// that an unsampled restriction still counts as work).
func (f *readFn) RestrictionSize(_ []byte, rest keyrange.Restriction) float64 {
	return float64(max(rest.Bytes, 1))
}

// CreateTracker tracks a restriction by row key.
func (f *readFn) CreateTracker(rest keyrange.Restriction) *keyrange.Tracker {
	return keyrange.NewTracker(rest)
}

// ProcessElement reads the rows of the tracker's restriction, claiming
// each before emitting it, until the read or the tracker ends.
func (f *readFn) ProcessElement(ctx context.Context, rt *keyrange.Tracker, _ []byte, emit func(Row)) error {
	c, err := f.client()
	if err != nil {
		return err
	}
	readRestricted.Inc(ctx, 1)
	defer func() {
		if n := rt.Splits(); n > 0 {
			readSplits.Inc(ctx, int64(n))
		}
	}()
	rest := rt.GetRestriction().(keyrange.Restriction)
	var nRows, nCells int64
	defer func() {
		// Not when nothing was read: prism (v2.77.0) keeps a bundle's
		// final counters whose short ids it has yet to resolve by short
		// id alone, so an empty residual's zero, landing while a split
		// primary's counts wait to be resolved, replaced them (see
		// RUNNERS.md).
		if nRows > 0 {
			rowsRead.Inc(ctx, nRows)
			cellsRead.Inc(ctx, nCells)
		}
	}()
	// claim claims a batch of rows read ahead, then emits those it
	// claimed (all, or those before the first key a split or the end
	// took away); false stops the read. A batch's claims take the
	// tracker's lock once: per row, a claim cost about as much as the
	// rest of beamio's work.
	claim := func(rows []cell.Row) bool {
		if h := beforeClaimHook; h != nil {
			for _, r := range rows {
				h(rt, r.Key)
			}
		}
		n := rt.TryClaimKeys(len(rows), func(i int) []byte { return rows[i].Key })
		for _, r := range rows[:n] {
			nRows++
			nCells += int64(len(r.Cells))
			emit(Row(r))
		}
		return n == len(rows)
	}
	ended, err := readAheadBatches(ctx, func(ctx context.Context, fn func(cell.Row) bool) (bool, error) {
		return f.Spec.scan(ctx, c, rest, fn)
	}, claim)
	if err != nil {
		return err
	}
	if ended {
		rt.TryClaim([]byte(nil)) // the read reached the end: the rest is done
	}
	return nil
}

// scan reads the rows of rest and hands each to fn until fn returns
// false; ended reports that the read reached rest's end instead.
func (sp readSpec) scan(ctx context.Context, c *client.Client, rest keyrange.Restriction, fn func(cell.Row) bool) (ended bool, err error) {
	var filter *bigtablepb.RowFilter
	if len(sp.Filter) > 0 {
		filter = &bigtablepb.RowFilter{}
		if err := proto.Unmarshal(sp.Filter, filter); err != nil {
			return false, fmt.Errorf("beamio: filter: %w", err)
		}
	}
	if sp.Script != "" {
		return sp.filterRows(ctx, c, rest, filter, fn)
	}
	opts := client.ScanOptions{Start: rest.Start, End: rest.End, Families: sp.Families,
		StartTime: sp.StartTime, EndTime: sp.EndTime, Filter: filter}
	if len(opts.Start) == 0 {
		opts.Start = nil
	}
	if len(opts.End) == 0 {
		opts.End = nil
	}
	sc := c.Scan(ctx, sp.Table.Table, opts)
	defer sc.Close()
	for sc.Next() {
		if !fn(sc.Row()) {
			return false, nil
		}
	}
	if err := sc.Err(); err != nil {
		return false, fmt.Errorf("beamio: read %s %v: %w", sp.Table.Table, rest, err)
	}
	return true, nil
}

// beforeClaimHook, when set by a test before a pipeline runs, is called
// before each row is claimed (in loopback mode the SDK worker runs in
// the test's process): the dynamic split test stalls a read there until
// the runner splits it.
var beforeClaimHook func(rt *keyrange.Tracker, key []byte)

// scriptRestarts bounds the restarts of a filter script's read after a
// retryable failure that came after it had delivered rows.
const scriptRestarts = 8

// filterRows reads the restriction through a filter script run in the
// servers. client.FilterRows retries a span only until it delivered a
// row; after that, this restarts the read after the last row claimed.
func (sp readSpec) filterRows(ctx context.Context, c *client.Client, rest keyrange.Restriction, filter *bigtablepb.RowFilter, claim func(cell.Row) bool) (ended bool, err error) {
	from := rest.Start
	backoff := 50 * time.Millisecond
	chain := client.FilterOf(client.ScanOptions{Families: sp.Families, StartTime: sp.StartTime, EndTime: sp.EndTime, Filter: filter})
	for attempt := 0; ; attempt++ {
		stopped := false
		var last []byte
		_, err := c.FilterRows(ctx, sp.Table.Table, sp.Script,
			client.ScriptOptions{Name: sp.ScriptName, Start: from, End: rest.End, Filter: chain},
			func(r client.Row) bool {
				cr := cell.Row{Key: r.Key, Cells: make([]cell.Cell, len(r.Cells))}
				for i, c := range r.Cells {
					cr.Cells[i] = c.Cell
				}
				if !claim(cr) {
					stopped = true
					return false
				}
				last = r.Key
				return true
			})
		if stopped {
			return false, nil
		}
		if err == nil {
			return true, nil
		}
		_, notServing := tabletpb.NotServingDetail(err)
		if !notServing && status.Code(err) != codes.Unavailable || attempt >= scriptRestarts {
			return false, fmt.Errorf("beamio: read %s %v through script %s: %w", sp.Table.Table, rest, sp.ScriptName, err)
		}
		readRestarts.Inc(ctx, 1)
		if last != nil {
			from = keyrange.Successor(last)
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}
