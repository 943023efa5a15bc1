package faultcampaign

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"cloud.google.com/go/bigtable"
	"cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/client"
)

// Family is the column family of the workload's cells.
const Family = "f"

// Event is one operation of the history, as a client saw it.
type Event struct {
	Client int    // porcupine's client id: a worker takes a new one after an unknown outcome
	Worker string // "official-1", "tabula-2"
	Row    string
	In     Input
	Out    Output
	Call   time.Duration // since the campaign's start
	Return time.Duration // -1: unknown outcome
	// Failed: the operation certainly had no effect (refused before it
	// reached a tablet, or a read that failed); it is left out of the
	// checked history but counts for availability.
	Failed bool
	Err    string
	Scan   int // >0: the id of the scan this read is a row of
}

// OK reports whether the operation succeeded.
func (e Event) OK() bool { return !e.Failed && !e.Out.Unknown }

// History collects the events of every worker.
type History struct {
	start time.Time
	mu    sync.Mutex
	ev    []Event
	ids   atomic.Int64
	scans atomic.Int64
}

// NewHistory starts the clock of a history.
func NewHistory(start time.Time) *History { return &History{start: start} }

// Since is the campaign time of t.
func (h *History) Since(t time.Time) time.Duration { return t.Sub(h.start) }

func (h *History) newClient() int { return int(h.ids.Add(1) - 1) }

func (h *History) add(e ...Event) {
	h.mu.Lock()
	h.ev = append(h.ev, e...)
	h.mu.Unlock()
}

// Events returns a copy of the events so far.
func (h *History) Events() []Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Event(nil), h.ev...)
}

// RowClient runs the workload's operations with one client library.
type RowClient interface {
	Name() string
	// Do runs a single-row operation (not OpScan).
	Do(ctx context.Context, row string, in Input) (Output, error)
	// Scan reads the rows in [start, end] with their latest cells.
	Scan(ctx context.Context, start, end string) (map[string]RowState, error)
}

// definitelyNotApplied reports whether a write's error proves it had no
// effect: it was refused before reaching a tablet (nobody serves the row,
// no connection could be made, the tablet's server said "not serving").
// Anything else — a deadline, a connection lost after sending — is an
// unknown outcome, and so is any answer to a write a client sent more than
// once after an attempt that may have applied it (Tabula's client says so,
// client.ErrOutcomeUnknown; the official client does not, retriedWrite):
// the last answer speaks for the last attempt only.
func definitelyNotApplied(err error) bool {
	var retried *retriedWrite
	if errors.Is(err, client.ErrOutcomeUnknown) || errors.As(err, &retried) && !refusedOutright(err) {
		return false
	}
	st, _ := status.FromError(err)
	msg := st.Message()
	for _, s := range []string{"is not assigned to a server", "locating tablets", "Error while dialing",
		"connection refused", "no tablet of", "no tablet holds", "not serving", "do not cover"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	switch st.Code() {
	case codes.InvalidArgument, codes.NotFound, codes.PermissionDenied, codes.Unauthenticated:
		return true
	}
	return false
}

// attemptsKey carries the record of the RPC attempts a client makes for
// one operation (withAttemptCounter, CountAttempts).
type attemptsKey struct{}

// attemptLog records one operation's RPC attempts, made one after the
// other.
type attemptLog struct {
	mu sync.Mutex
	// open counts the attempts that may have been applied: answered OK,
	// or failed in a way that leaves it open (not definitelyNotApplied).
	open int
	// lastOpen: the latest attempt is one of them.
	lastOpen bool
}

// earlierOpen is how many attempts before the last may have been applied:
// each is an operation of unknown outcome beside the last one's answer.
func (a *attemptLog) earlierOpen() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.lastOpen {
		return a.open - 1
	}
	return a.open
}

// withAttemptCounter returns ctx with a fresh record of attempts.
func withAttemptCounter(ctx context.Context) (context.Context, *attemptLog) {
	a := &attemptLog{}
	return context.WithValue(ctx, attemptsKey{}, a), a
}

// CountAttempts is a gRPC client interceptor that records each unary call
// in the operation's record (withAttemptCounter), so that a client's own
// resends of a write are seen — the official client's, and Tabula's
// (client.Options.UnaryInterceptors). An attempt refused before it could
// apply anything (Tabula's client resends after "not serving" all the
// time: tablets move and split) is not one of those that may have been
// applied: counting it would add an operation of unknown outcome the
// checker must place, for nothing. Nor is an attempt gRPC could not send
// at all: an UNAVAILABLE with no peer (no transport stream was made, the
// server being dead, paused or unreachable), which is when Tabula's client
// resends even a non-idempotent increment — the same test as its own
// (storage/client's trackedConn). Judged by their message alone, such
// attempts left a CI run's row with 22 increments of unknown outcome, a
// history too wide for the checker to finish.
func CountAttempts(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	a, ok := ctx.Value(attemptsKey{}).(*attemptLog)
	if !ok || !writeMethods[method] {
		// Not an attempt of the write: the calls a client makes to find
		// the row's tablet (Tabula's client asks a server for the root's
		// location, GetRoot, whenever it locates afresh) change nothing.
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	var sentTo peer.Peer
	err := invoker(ctx, method, req, reply, cc, append(opts, grpc.Peer(&sentTo))...)
	unsent := status.Code(err) == codes.Unavailable && sentTo.Addr == nil
	open := err == nil || !unsent && !definitelyNotApplied(err)
	a.mu.Lock()
	if open {
		a.open++
	}
	a.lastOpen = open
	a.mu.Unlock()
	return err
}

// writeMethods are the data API's unary writes, the calls CountAttempts
// counts: the campaign's writes (put, delete, CAS, increment, append)
// are each one of them, by either client.
var writeMethods = map[string]bool{
	bigtablepb.Bigtable_MutateRow_FullMethodName:          true,
	bigtablepb.Bigtable_CheckAndMutateRow_FullMethodName:  true,
	bigtablepb.Bigtable_ReadModifyWriteRow_FullMethodName: true,
}

// retriedWrite is the error of a write the official client retries on its
// own — a mutation without server timestamps, on UNAVAILABLE, DEADLINE_EXCEEDED
// or ABORTED — and so may have sent more than once: its last answer does
// not tell what an earlier attempt did.
type retriedWrite struct{ err error }

func (e *retriedWrite) Error() string { return e.err.Error() }
func (e *retriedWrite) Unwrap() error { return e.err }

// refusedOutright reports whether err is an answer no attempt of a write
// could have been applied with: the request itself was refused.
func refusedOutright(err error) bool {
	switch status.Code(err) {
	case codes.InvalidArgument, codes.NotFound, codes.PermissionDenied, codes.Unauthenticated:
		return true
	}
	return false
}

// official is RowClient over the official Cloud Bigtable client.
type official struct {
	name string
	tbl  *bigtable.Table
}

// NewOfficial returns a RowClient over tbl.
func NewOfficial(name string, tbl *bigtable.Table) RowClient { return &official{name: name, tbl: tbl} }

func (o *official) Name() string { return o.name }

func (o *official) Do(ctx context.Context, row string, in Input) (Output, error) {
	switch in.Kind {
	case OpPut:
		m := bigtable.NewMutation()
		m.Set(Family, "c", bigtable.ServerTime, []byte(in.Value))
		m.Set(Family, "d", bigtable.ServerTime, []byte(in.Value))
		return Output{}, o.tbl.Apply(ctx, row, m)
	case OpDelete:
		m := bigtable.NewMutation()
		m.DeleteCellsInColumn(Family, "c")
		m.DeleteCellsInColumn(Family, "d")
		if err := o.tbl.Apply(ctx, row, m); err != nil {
			return Output{}, &retriedWrite{err}
		}
		return Output{}, nil
	case OpCAS:
		set := bigtable.NewMutation()
		set.Set(Family, "v", bigtable.ServerTime, []byte(in.Value))
		set.Set(Family, "w", bigtable.ServerTime, []byte(in.Value))
		var predMatched bool
		var cond *bigtable.Mutation
		if in.Expect == "" {
			cond = bigtable.NewCondMutation(bigtable.ColumnFilter("v"), nil, set)
		} else {
			cond = bigtable.NewCondMutation(bigtable.ChainFilters(bigtable.ColumnFilter("v"), bigtable.LatestNFilter(1),
				bigtable.ValueFilter(regexp.QuoteMeta(in.Expect))), set, nil)
		}
		err := o.tbl.Apply(ctx, row, cond, bigtable.GetCondMutationResult(&predMatched))
		return Output{Matched: predMatched == (in.Expect != "")}, err
	case OpIncr, OpAppend:
		rmw := bigtable.NewReadModifyWrite()
		if in.Kind == OpIncr {
			rmw.Increment(Family, "n", 1)
		} else {
			rmw.AppendValue(Family, "a", []byte(in.Value))
		}
		r, err := o.tbl.ApplyReadModifyWrite(ctx, row, rmw)
		if err != nil {
			return Output{}, err
		}
		st, err := officialState(r)
		return Output{N: st.N, A: st.A}, err
	case OpRead:
		r, err := o.tbl.ReadRow(ctx, row, bigtable.RowFilter(bigtable.LatestNFilter(1)))
		if err != nil {
			return Output{}, err
		}
		st, err := officialState(r)
		return Output{Read: st}, err
	}
	return Output{}, fmt.Errorf("official client: no operation %v", in.Kind)
}

func (o *official) Scan(ctx context.Context, start, end string) (map[string]RowState, error) {
	out := map[string]RowState{}
	var perr error
	err := o.tbl.ReadRows(ctx, bigtable.NewClosedRange(start, end), func(r bigtable.Row) bool {
		st, err := officialState(r)
		if err != nil {
			perr = err
			return false
		}
		out[r.Key()] = st
		return true
	}, bigtable.RowFilter(bigtable.LatestNFilter(1)))
	if err == nil {
		err = perr
	}
	return out, err
}

// officialState reads the workload's columns of a row.
func officialState(r bigtable.Row) (RowState, error) {
	var s RowState
	for _, it := range r[Family] {
		if err := setColumn(&s, strings.TrimPrefix(it.Column, Family+":"), it.Value); err != nil {
			return s, err
		}
	}
	return s, nil
}

// setColumn sets the workload column q of s to value.
func setColumn(s *RowState, q string, value []byte) error {
	switch q {
	case "c":
		s.C = string(value)
	case "d":
		s.D = string(value)
	case "v":
		s.V = string(value)
	case "w":
		s.W = string(value)
	case "a":
		s.A = string(value)
	case "n":
		if len(value) != 8 {
			return fmt.Errorf("counter of %d bytes", len(value))
		}
		s.N = int64(binary.BigEndian.Uint64(value))
	}
	return nil
}

// tabula is RowClient over Tabula's storage/client.
type tabula struct {
	name, table string
	cl          *client.Client
}

// NewTabula returns a RowClient over cl on table.
func NewTabula(name string, cl *client.Client, table string) RowClient {
	return &tabula{name: name, table: table, cl: cl}
}

func (t *tabula) Name() string { return t.name }

func (t *tabula) Do(ctx context.Context, row string, in Input) (Output, error) {
	key := []byte(row)
	switch in.Kind {
	case OpPut:
		return Output{}, t.cl.Apply(ctx, t.table, cell.RowMutation{Row: key, Mutations: []cell.Mutation{
			cell.Set(Family, []byte("c"), cell.ServerTimestamp, []byte(in.Value)),
			cell.Set(Family, []byte("d"), cell.ServerTimestamp, []byte(in.Value))}})
	case OpDelete:
		return Output{}, t.cl.Apply(ctx, t.table, cell.RowMutation{Row: key, Mutations: []cell.Mutation{
			cell.DeleteColumn(Family, []byte("c"), 0, 0), cell.DeleteColumn(Family, []byte("d"), 0, 0)}})
	case OpCAS:
		set := []cell.Mutation{cell.Set(Family, []byte("v"), cell.ServerTimestamp, []byte(in.Value)),
			cell.Set(Family, []byte("w"), cell.ServerTimestamp, []byte(in.Value))}
		column := &bigtablepb.RowFilter{Filter: &bigtablepb.RowFilter_ColumnQualifierRegexFilter{ColumnQualifierRegexFilter: []byte("v")}}
		if in.Expect == "" {
			matched, err := t.cl.CheckAndMutate(ctx, t.table, key, column, nil, set)
			return Output{Matched: !matched}, err
		}
		pred := &bigtablepb.RowFilter{Filter: &bigtablepb.RowFilter_Chain_{Chain: &bigtablepb.RowFilter_Chain{Filters: []*bigtablepb.RowFilter{
			column,
			{Filter: &bigtablepb.RowFilter_CellsPerColumnLimitFilter{CellsPerColumnLimitFilter: 1}},
			{Filter: &bigtablepb.RowFilter_ValueRegexFilter{ValueRegexFilter: []byte(regexp.QuoteMeta(in.Expect))}},
		}}}}
		matched, err := t.cl.CheckAndMutate(ctx, t.table, key, pred, set, nil)
		return Output{Matched: matched}, err
	case OpIncr, OpAppend:
		rule := client.ReadModifyWriteRule{Family: Family, Qualifier: []byte("n"), Increment: 1}
		if in.Kind == OpAppend {
			rule = client.ReadModifyWriteRule{Family: Family, Qualifier: []byte("a"), Append: []byte(in.Value)}
		}
		r, err := t.cl.ReadModifyWrite(ctx, t.table, key, []client.ReadModifyWriteRule{rule})
		if err != nil {
			return Output{}, err
		}
		st, err := tabulaState(r)
		return Output{N: st.N, A: st.A}, err
	case OpRead:
		r, _, err := t.cl.ReadRow(ctx, t.table, key, client.ScanOptions{MaxVersions: 1})
		if err != nil {
			return Output{}, err
		}
		st, err := tabulaState(r)
		return Output{Read: st}, err
	}
	return Output{}, fmt.Errorf("tabula client: no operation %v", in.Kind)
}

func (t *tabula) Scan(ctx context.Context, start, end string) (map[string]RowState, error) {
	s := t.cl.Scan(ctx, t.table, client.ScanOptions{Start: []byte(start), End: []byte(end + "\x00"), MaxVersions: 1})
	defer s.Close()
	out := map[string]RowState{}
	for s.Next() {
		st, err := tabulaState(s.Row())
		if err != nil {
			return out, err
		}
		out[string(s.Row().Key)] = st
	}
	return out, s.Err()
}

func tabulaState(r cell.Row) (RowState, error) {
	var s RowState
	for _, c := range r.Cells {
		if c.Family != Family {
			continue
		}
		if err := setColumn(&s, string(c.Qualifier), c.Value); err != nil {
			return s, err
		}
	}
	return s, nil
}

// Worker runs random operations on the hot rows with one client until
// ctx ends, recording each in h.
type Worker struct {
	Client  RowClient
	Rows    []string
	History *History
	Timeout time.Duration // of one operation
	Seed    uint64

	seq     int
	lastV   map[string]string // the last value of v this worker saw per row
	rng     *rand.Rand
	current int
}

// Run loops until ctx ends.
func (w *Worker) Run(ctx context.Context) {
	w.rng = rand.New(rand.NewPCG(w.Seed, 0x5eed))
	w.lastV = map[string]string{}
	w.current = w.History.newClient()
	for ctx.Err() == nil {
		if !w.one(ctx) {
			// Back off a little after a failure: an outage would
			// otherwise fill the history with refused operations.
			select {
			case <-ctx.Done():
			case <-time.After(time.Duration(50+w.rng.IntN(100)) * time.Millisecond):
			}
		}
	}
}

// pick chooses the next operation.
func (w *Worker) pick(row string) Input {
	w.seq++
	token := fmt.Sprintf("%s.%d", strings.ReplaceAll(w.Client.Name(), "-", ""), w.seq)
	switch r := w.rng.IntN(100); {
	case r < 14:
		return Input{Kind: OpPut, Value: token}
	case r < 19:
		return Input{Kind: OpDelete}
	case r < 34:
		exp := ""
		if w.rng.IntN(4) != 0 {
			exp = w.lastV[row]
		}
		return Input{Kind: OpCAS, Expect: exp, Value: token}
	case r < 52:
		return Input{Kind: OpIncr}
	case r < 64:
		return Input{Kind: OpAppend, Value: "/" + token}
	case r < 88:
		return Input{Kind: OpRead}
	default:
		return Input{Kind: OpScan}
	}
}

// one runs one operation and reports whether it succeeded.
func (w *Worker) one(ctx context.Context) bool {
	i := w.rng.IntN(len(w.Rows))
	row := w.Rows[i]
	in := w.pick(row)
	octx, cancel := context.WithTimeout(ctx, w.Timeout)
	defer cancel()
	call := w.History.Since(time.Now())
	if in.Kind == OpScan {
		j := min(i+2, len(w.Rows)-1)
		got, err := w.Client.Scan(octx, w.Rows[i], w.Rows[j])
		ret := w.History.Since(time.Now())
		id := int(w.History.scans.Add(1))
		var evs []Event
		for _, r := range w.Rows[i : j+1] {
			e := Event{Client: w.current, Worker: w.Client.Name(), Row: r, In: Input{Kind: OpRead}, Call: call, Return: ret, Scan: id}
			if err != nil {
				e.Failed, e.Err = true, err.Error()
			} else {
				e.Out.Read = got[r]
				w.noteV(r, got[r].V)
			}
			evs = append(evs, e)
		}
		w.History.add(evs...)
		return err == nil
	}
	octx, attempts := withAttemptCounter(octx)
	out, err := w.Client.Do(octx, row, in)
	e := Event{Client: w.current, Worker: w.Client.Name(), Row: row, In: in, Out: out, Call: call, Return: w.History.Since(time.Now())}
	if in.Kind.IsWrite() {
		// Every attempt before the last that the client sent on its
		// own (both clients resend an idempotent mutation, a delete,
		// after UNAVAILABLE) and that may have been applied, was
		// applied or not at any time from the call on: an operation
		// of unknown outcome each, beside the last attempt's answer.
		for range attempts.earlierOpen() {
			w.History.add(Event{Client: w.History.newClient(), Worker: w.Client.Name(), Row: row, In: in,
				Out: Output{Unknown: true}, Call: call, Return: -1, Err: "an earlier attempt of a resent write"})
		}
	}
	switch {
	case err == nil:
		if in.Kind == OpRead {
			w.noteV(row, out.Read.V)
		}
		if in.Kind == OpCAS && out.Matched {
			w.lastV[row] = in.Value
		}
	case !in.Kind.IsWrite() || definitelyNotApplied(err):
		e.Failed, e.Err = true, err.Error()
	default:
		e.Out, e.Err, e.Return = Output{Unknown: true}, err.Error(), -1
	}
	w.History.add(e)
	if e.Out.Unknown {
		// The operation may still be in flight: the next ones are
		// another porcupine client's (its operations never overlap).
		w.current = w.History.newClient()
	}
	if errors.Is(ctx.Err(), context.Canceled) && err != nil {
		return true
	}
	return err == nil
}

func (w *Worker) noteV(row, v string) {
	if v != "" {
		w.lastV[row] = v
	}
}
