package tabletserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"time"

	"cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/tabuladb/tabula/scripts"
	"github.com/tabuladb/tabula/scripts/vm"
	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/filter"
	"github.com/tabuladb/tabula/storage/tablet"
	"github.com/tabuladb/tabula/storage/tabletdesc"
	"github.com/tabuladb/tabula/storage/tabletserver/scriptpb"
)

// DefaultScriptBatchBytes is the default ScriptOptions.BatchBytes.
const DefaultScriptBatchBytes = 1 << 20

// ScriptOptions configure NewScriptService. Zero values take the
// documented defaults.
type ScriptOptions struct {
	// MaxLimits are the server's maxima: a request's limits are clamped
	// to them, and a limit a request leaves at zero takes the maximum.
	// A zero field is vm.DefaultLimits' value (10M steps per row,
	// 256 MiB, 10 minutes, call depth 10,000).
	MaxLimits scripts.Limits
	// BatchBytes: kept rows are sent once a response holds about this
	// many bytes of cells; default DefaultScriptBatchBytes.
	BatchBytes int
	// FilterLimits bound the RowFilters requests may send.
	FilterLimits filter.Limits
	// MaxRuns bounds the runs evaluating at once; more wait for a slot
	// (or their deadline). Scripts are CPU-bound: without a bound, a few
	// clients' runaway scripts would hold every core for their whole wall
	// time and starve the data API. Default 2 × GOMAXPROCS.
	MaxRuns int
	// Logger receives the errors the server is to blame for; default the
	// Host's logger.
	Logger *slog.Logger
}

// ScriptService implements tabula.scripts.v1.Scripts over a Host's
// tablets: it runs a client's script next to the data and returns only
// what the script outputs. Register it with scriptpb.RegisterScriptsServer
// on the grpc.Server that serves the DataService.
//
// A script cannot harm the server: every run is bounded (MaxLimits), a
// run past a bound ends only its own RPC (RESOURCE_EXHAUSTED), and a
// panic inside the evaluator is caught by package scripts.
type ScriptService struct {
	scriptpb.UnimplementedScriptsServer
	host    *Host
	opts    ScriptOptions
	log     *slog.Logger
	metrics *scriptMetrics
	slots   chan struct{} // one per run evaluating
}

// NewScriptService returns the script service over host. Its metrics go to
// the Host's registerer (HostOptions.Registerer); should that refuse
// them (a conflicting collector of the same name), they are logged as
// such and still counted, unexported: a metrics clash must not keep the
// service from serving.
func NewScriptService(host *Host, opts ScriptOptions) *ScriptService {
	if opts.Logger == nil {
		opts.Logger = host.log
	}
	if opts.BatchBytes <= 0 {
		opts.BatchBytes = DefaultScriptBatchBytes
	}
	if opts.MaxRuns <= 0 {
		opts.MaxRuns = 2 * runtime.GOMAXPROCS(0)
	}
	opts.MaxLimits = withDefaultLimits(opts.MaxLimits)
	m, err := newScriptMetrics(host.opts.Registerer)
	if err != nil {
		opts.Logger.Warn("script metrics not registered", "err", err)
	}
	return &ScriptService{host: host, opts: opts, log: opts.Logger, metrics: m, slots: make(chan struct{}, opts.MaxRuns)}
}

func withDefaultLimits(l scripts.Limits) scripts.Limits {
	d := vm.DefaultLimits
	if l.Steps <= 0 {
		l.Steps = d.Steps
	}
	if l.Memory <= 0 {
		l.Memory = d.Memory
	}
	if l.Time <= 0 {
		l.Time = d.Time
	}
	if l.Depth <= 0 {
		l.Depth = d.Depth
	}
	return l
}

// clampLimits turns a request's limits into the run's: zero takes the
// server's maximum, anything above it is lowered to it.
func clampLimits(req *scriptpb.Limits, maxl scripts.Limits) scripts.Limits {
	pick := func(asked, most int64) int64 {
		if asked <= 0 || asked > most {
			return most
		}
		return asked
	}
	return scripts.Limits{
		Steps:  pick(req.GetSteps(), maxl.Steps),
		Memory: pick(req.GetMemoryBytes(), maxl.Memory),
		Time:   time.Duration(pick(req.GetTimeMillis(), maxl.Time.Milliseconds())) * time.Millisecond,
		Depth:  int(pick(int64(req.GetCallDepth()), int64(maxl.Depth))),
	}
}

// ListTablets lists the tablets of the table this server holds.
func (s *ScriptService) ListTablets(ctx context.Context, req *scriptpb.ListTabletsRequest) (*scriptpb.ListTabletsResponse, error) {
	t, err := s.host.lookupTable(req.GetTableName())
	if err != nil {
		return nil, err
	}
	resp := &scriptpb.ListTabletsResponse{}
	st, err := s.host.table(t.ID)
	if err != nil {
		return resp, nil // closed meanwhile: no tablets, as TableTablets says
	}
	// Only IDs and ranges: not TableTablets, whose sizes sample every
	// tablet's files (the answer has no sizes, and clients list a
	// table's tablets before each read they plan).
	for _, tb := range st.list() {
		r := tb.Range()
		resp.Tablets = append(resp.Tablets, &scriptpb.Tablet{Id: tb.ID(), StartKey: r.Start, EndKey: r.End})
	}
	return resp, nil
}

// errScriptTime is the cause of a run's context when its wall-time limit
// passes while the scan, not the script, is working.
var errScriptTime = errors.New("script wall time over")

// Run compiles the request's script and runs it over the rows of the
// range this server holds; see scripts.proto for the contract.
func (s *ScriptService) Run(req *scriptpb.RunRequest, stream scriptpb.Scripts_RunServer) (err error) {
	kind := "aggregate"
	defer func() {
		if err != nil {
			s.metrics.errors.WithLabelValues(errorKind(err)).Inc()
		}
	}()
	t, err := s.host.lookupTable(req.GetTableName())
	if err != nil {
		return err
	}
	name := req.GetName()
	if name == "" {
		name = "script"
	}
	prog, err := scripts.Compile(name, req.GetSource())
	if err != nil {
		var ce *scripts.CompileError
		if errors.As(err, &ce) {
			return status.Errorf(codes.InvalidArgument, "source: %s does not compile:\n%s", name, prefixLines(name, ce.Error()))
		}
		return invalidf("source", "%v", err)
	}
	if prog.IsFilter() {
		kind = "filter"
	}
	select {
	case s.slots <- struct{}{}:
	case <-stream.Context().Done():
		return toStatus(stream.Context().Err())
	}
	defer func() { <-s.slots }()
	s.metrics.active.Inc()
	defer s.metrics.active.Dec()
	s.metrics.runs.WithLabelValues(kind).Inc()
	var f *filter.Filter
	ro := tablet.ReadOptions{}
	if len(req.GetFilter()) > 0 {
		var rf bigtablepb.RowFilter
		if err := proto.Unmarshal(req.GetFilter(), &rf); err != nil {
			return invalidf("filter", "not a google.bigtable.v2.RowFilter: %v", err)
		}
		if f, err = filter.Compile(&rf, s.opts.FilterLimits, filter.WithField("filter")); err != nil {
			return err
		}
		ro = readOptions(f.PushDown())
	}
	start, end, err := scriptRange(req)
	if err != nil {
		return err
	}
	limits := clampLimits(req.GetLimits(), s.opts.MaxLimits)
	// The VM checks wall time only while the script runs; the context
	// also stops a scan that reads long stretches of rows the filter
	// drops.
	ctx, cancel := context.WithTimeoutCause(stream.Context(), limits.Time, errScriptTime)
	defer cancel()

	run := prog.NewRun(limits)
	var (
		scanned   int64
		batch     []*scriptpb.Row
		batchSize int
	)
	err = s.host.scan(ctx, t.ID, start, end, false, ro, func(row cell.Row) error {
		scanned++
		var out []filter.LabeledCell
		if f != nil {
			if out = f.Apply(row); len(out) == 0 {
				return nil
			}
			cs := make([]cell.Cell, len(out))
			for i := range out {
				cs[i] = out[i].Cell
			}
			row = cell.Row{Key: row.Key, Cells: cs}
		}
		kept, err := run.Process(row)
		if err != nil {
			return &rowError{key: row.Key, err: err}
		}
		if !kept || req.GetOmitRows() {
			return nil
		}
		pr, n := rowToProto(row, out)
		batch = append(batch, pr)
		batchSize += n
		if batchSize < s.opts.BatchBytes {
			return nil
		}
		err = stream.Send(&scriptpb.RunResponse{Rows: batch})
		batch, batchSize = nil, 0
		return err
	})
	if err != nil {
		if context.Cause(ctx) == errScriptTime && stream.Context().Err() == nil {
			return status.Errorf(codes.ResourceExhausted, "%s: script exceeded time limit (%v)", name, limits.Time)
		}
		return s.runError(name, err)
	}
	st := run.Stats()
	s.metrics.rows.Add(float64(st.Rows))
	partial, err := run.Partial().MarshalBinary()
	if err != nil {
		return s.runError(name, err)
	}
	return stream.Send(&scriptpb.RunResponse{
		Rows:    batch,
		Partial: partial,
		Stats:   &scriptpb.Stats{Rows: st.Rows, Kept: st.Kept, Steps: st.Steps, RowsScanned: scanned},
	})
}

// rowError is a script error with the row it happened on.
type rowError struct {
	key []byte
	err error
}

func (e *rowError) Error() string { return fmt.Sprintf("row %q: %v", e.key, e.err) }
func (e *rowError) Unwrap() error { return e.err }

// runError maps an error that ended a run to its status: a bound to
// RESOURCE_EXHAUSTED naming it, a script's run-time error to
// INVALID_ARGUMENT (the script is wrong for the data), the rest as the
// data API maps it.
func (s *ScriptService) runError(name string, err error) error {
	var le *scripts.LimitError
	if errors.As(err, &le) {
		return status.Errorf(codes.ResourceExhausted, "%s:%v", name, le)
	}
	var re *scripts.RuntimeError
	if errors.As(err, &re) {
		var row []byte
		var rerr *rowError
		if errors.As(err, &rerr) {
			row = rerr.key
		}
		if re.Panic {
			// Tabula's bug, not the script's: log it for us.
			s.log.Error("script evaluation panicked", "script", name, "err", re)
		}
		return status.Errorf(codes.InvalidArgument, "script run-time error at row %q: %s:%v", row, name, re)
	}
	err = s.host.toStatus(err)
	switch status.Code(err) {
	case codes.Internal, codes.Unavailable, codes.FailedPrecondition:
		s.log.Error("script run failed", "script", name, "err", err)
	}
	return err
}

// errorKind classifies a failed Run for the errors metric.
func errorKind(err error) string {
	switch c := status.Code(err); {
	case c == codes.ResourceExhausted:
		return "limit"
	case c == codes.InvalidArgument && strings.HasPrefix(status.Convert(err).Message(), "script run-time error"):
		return "runtime"
	case c == codes.InvalidArgument && strings.HasPrefix(status.Convert(err).Message(), "source:"):
		return "compile"
	case c == codes.InvalidArgument || c == codes.NotFound:
		return "request"
	case c == codes.Canceled || c == codes.DeadlineExceeded:
		return "canceled"
	}
	return "server"
}

// prefixLines puts "name:" before every LINE:COL: line of a compile
// error, so each line reads FILE:LINE:COL: message.
func prefixLines(name, msg string) string {
	lines := strings.Split(msg, "\n")
	for i, l := range lines {
		lines[i] = name + ":" + l
	}
	return strings.Join(lines, "\n")
}

// scriptRange returns the request's row range as [start, end), nil end
// for the end of the table.
func scriptRange(req *scriptpb.RunRequest) (start, end []byte, err error) {
	if p := req.GetRowPrefix(); len(p) > 0 {
		if len(req.GetStartKey()) > 0 || len(req.GetEndKey()) > 0 {
			return nil, nil, invalidf("row_prefix", "cannot be combined with start_key or end_key")
		}
		return p, cell.PrefixSuccessor(p), nil
	}
	start, end = req.GetStartKey(), req.GetEndKey()
	if (tabletdesc.KeyRange{Start: start, End: end}).Empty() {
		return nil, nil, invalidf("end_key", "%q is not after start_key %q", end, start)
	}
	if len(end) == 0 {
		return start, nil, nil
	}
	return start, end, nil
}

// rowToProto converts a kept row, with the filter's output cells (and
// labels) when there was a filter, and returns its approximate size.
func rowToProto(row cell.Row, labeled []filter.LabeledCell) (*scriptpb.Row, int) {
	pr := &scriptpb.Row{Key: row.Key, Cells: make([]*scriptpb.Cell, len(row.Cells))}
	n := len(row.Key)
	for i, c := range row.Cells {
		pc := &scriptpb.Cell{Family: c.Family, Qualifier: c.Qualifier, TimestampMicros: c.Timestamp, Value: c.Value}
		if labeled != nil {
			pc.Labels = labeled[i].Labels
		}
		pr.Cells[i] = pc
		n += len(c.Family) + len(c.Qualifier) + len(c.Value) + 16
	}
	return pr, n
}
