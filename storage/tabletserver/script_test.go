package tabletserver

import (
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/tabuladb/tabula/scripts"
	"github.com/tabuladb/tabula/storage/tabletserver/scriptpb"
)

// newScriptEnv is a testEnv whose host also serves the script service,
// on its own gRPC server, with the data API next to it.
func newScriptEnv(t *testing.T, so ScriptOptions) (*testEnv, scriptpb.ScriptsClient) {
	t.Helper()
	e := newTestEnv(t, HostOptions{}, DataOptions{})
	svc := NewScriptService(e.host, so)
	srv := grpc.NewServer(grpc.StreamInterceptor(e.host.StreamInterceptor()), grpc.UnaryInterceptor(e.host.UnaryInterceptor()))
	scriptpb.RegisterScriptsServer(srv, svc)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(lis)
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close(); srv.Stop() })
	return e, scriptpb.NewScriptsClient(cc)
}

// fillPages writes n rows "row%03d", each with a "size" cell whose value
// is the row number and, for even rows, an "even" cell.
func fillPages(t *testing.T, e *testEnv, tbl *bigtable.Table, n int) {
	t.Helper()
	for i := range n {
		m := bigtable.NewMutation()
		m.Set("f", "size", ts(1000), []byte(fmt.Sprint(i)))
		if i%2 == 0 {
			m.Set("g", "even", ts(1000), []byte("yes"))
		}
		if err := tbl.Apply(e.ctx, fmt.Sprintf("row%03d", i), m); err != nil {
			t.Fatal(err)
		}
	}
}

// runScript calls Run and collects the kept rows and the final message.
func runScript(ctx context.Context, c scriptpb.ScriptsClient, req *scriptpb.RunRequest) (rows []*scriptpb.Row, last *scriptpb.RunResponse, err error) {
	stream, err := c.Run(ctx, req)
	if err != nil {
		return nil, nil, err
	}
	for {
		resp, err := stream.Recv()
		if err == io.EOF {
			return rows, last, nil
		}
		if err != nil {
			return rows, nil, err
		}
		rows = append(rows, resp.GetRows()...)
		if resp.GetStats() != nil {
			last = resp
		}
	}
}

// decode turns a final message's partial into the script's result.
func decode(t *testing.T, src string, resp *scriptpb.RunResponse) *scripts.Result {
	t.Helper()
	prog, err := scripts.Compile("s", src)
	if err != nil {
		t.Fatal(err)
	}
	p := prog.NewPartial()
	if err := p.UnmarshalBinary(resp.GetPartial()); err != nil {
		t.Fatal(err)
	}
	return p.Result()
}

const sumScript = `
total: table sum of int;
byParity: table sum[even: bool] of int;
n: int = int(string(input.cells[0].value));
emit total <- n;
emit byParity[n % 2 == 0] <- 1;
`

// TestScriptRunAggregate runs a summary over a table of three tablets, a
// range and a prefix: the partial holds exactly the rows of the range.
func TestScriptRunAggregate(t *testing.T) {
	e, sc := newScriptEnv(t, ScriptOptions{})
	tbl := e.createTable(tableDef{name: "t", families: []string{"f", "g"}, splits: []string{"row010", "row020"}})
	fillPages(t, e, tbl, 30)
	for _, tc := range []struct {
		name       string
		req        *scriptpb.RunRequest
		total      int64
		rows, even int64
	}{
		{"whole table", &scriptpb.RunRequest{}, 29 * 30 / 2, 30, 15},
		{"range across tablets", &scriptpb.RunRequest{StartKey: []byte("row005"), EndKey: []byte("row025")}, (5 + 24) * 20 / 2, 20, 10},
		{"open end", &scriptpb.RunRequest{StartKey: []byte("row028")}, 28 + 29, 2, 1},
		{"prefix", &scriptpb.RunRequest{RowPrefix: []byte("row01")}, (10 + 19) * 10 / 2, 10, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := proto.Clone(tc.req).(*scriptpb.RunRequest)
			req.TableName, req.Name, req.Source = tableName("t"), "sum.szl", sumScript
			rows, last, err := runScript(e.ctx, sc, req)
			if err != nil {
				t.Fatal(err)
			}
			if len(rows) != 0 {
				t.Errorf("an aggregate script returned %d rows", len(rows))
			}
			res := decode(t, sumScript, last)
			if got := res.Table("total").Entries[0].Value; got != tc.total {
				t.Errorf("total = %v, want %d", got, tc.total)
			}
			var even int64
			for _, en := range res.Table("byParity").Entries {
				if en.Key[0] == true {
					even = en.Value.(int64)
				}
			}
			if even != tc.even {
				t.Errorf("even rows = %d, want %d", even, tc.even)
			}
			if st := last.GetStats(); st.GetRows() != tc.rows || st.GetRowsScanned() != tc.rows || st.GetKept() != 0 || st.GetSteps() == 0 {
				t.Errorf("stats = %v, want %d rows", st, tc.rows)
			}
		})
	}
}

// TestScriptFilterMode checks that exactly the kept rows come back, with
// the cells (and labels) of the request's RowFilter, which the script
// sees first, in batches when they are many.
func TestScriptFilterMode(t *testing.T) {
	e, sc := newScriptEnv(t, ScriptOptions{BatchBytes: 64})
	tbl := e.createTable(tableDef{name: "t", families: []string{"f", "g"}, splits: []string{"row010"}})
	fillPages(t, e, tbl, 20)
	const src = `
seen: table sum of int;
emit seen <- 1;
# Rows that still have the "even" cell after the filter and a size above 4.
when (i: some int; input.cells[i].family == "g")
    if (int(string(input.cells[0].value)) > 4)
        emit keep <- true;
`
	rf := &bigtablepb.RowFilter{Filter: &bigtablepb.RowFilter_Chain_{Chain: &bigtablepb.RowFilter_Chain{Filters: []*bigtablepb.RowFilter{
		{Filter: &bigtablepb.RowFilter_RowKeyRegexFilter{RowKeyRegexFilter: []byte("row01.*|row00[0-7]")}},
		{Filter: &bigtablepb.RowFilter_ApplyLabelTransformer{ApplyLabelTransformer: "x"}},
	}}}}
	fb, err := proto.Marshal(rf)
	if err != nil {
		t.Fatal(err)
	}
	stream, err := sc.Run(e.ctx, &scriptpb.RunRequest{TableName: tableName("t"), Source: src, Filter: fb})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	var messages int
	var last *scriptpb.RunResponse
	for {
		resp, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		messages++
		for _, r := range resp.GetRows() {
			keys = append(keys, string(r.GetKey()))
			if len(r.GetCells()) != 2 || r.GetCells()[0].GetFamily() != "f" || r.GetCells()[1].GetFamily() != "g" ||
				string(r.GetCells()[1].GetValue()) != "yes" || fmt.Sprint(r.GetCells()[0].GetLabels()) != "[x]" {
				t.Errorf("row %s cells = %v", r.GetKey(), r.GetCells())
			}
		}
		if resp.GetStats() != nil {
			last = resp
		}
	}
	want := "row006 row010 row012 row014 row016 row018"
	if got := strings.Join(keys, " "); got != want {
		t.Errorf("kept %s, want %s", got, want)
	}
	if messages < 3 {
		t.Errorf("%d messages: small BatchBytes should have sent rows in several", messages)
	}
	// The filter dropped rows 8 and 9 before the script: it saw 18 rows.
	st := last.GetStats()
	if st.GetRowsScanned() != 20 || st.GetRows() != 18 || st.GetKept() != 6 {
		t.Errorf("stats = %v", st)
	}
	if got := decode(t, src, last).Table("seen").Entries[0].Value; got != int64(18) {
		t.Errorf("seen = %v, want 18", got)
	}
	// omit_rows: the same run, tables and stats only.
	rows, last, err := runScript(e.ctx, sc, &scriptpb.RunRequest{TableName: tableName("t"), Source: src, Filter: fb, OmitRows: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 0 || last.GetStats().GetKept() != 6 {
		t.Errorf("omit_rows: %d rows sent, stats %v", len(rows), last.GetStats())
	}
}

// TestScriptErrors checks the statuses of bad requests and failed
// scripts: every compile diagnostic with its position, run-time errors
// with the row, unknown tables, bad filters and ranges.
func TestScriptErrors(t *testing.T) {
	e, sc := newScriptEnv(t, ScriptOptions{})
	tbl := e.createTable(tableDef{name: "t", families: []string{"f", "g"}})
	fillPages(t, e, tbl, 3)
	for _, tc := range []struct {
		name  string
		req   *scriptpb.RunRequest
		code  codes.Code
		parts []string
	}{
		{"compile errors", &scriptpb.RunRequest{Name: "bad.szl", Source: "x: int = \"s\";\ny: string = 1;\n"},
			codes.InvalidArgument, []string{"bad.szl does not compile", "bad.szl:1:", "bad.szl:2:"}},
		{"run-time error", &scriptpb.RunRequest{Name: "rt.szl", Source: "t: table sum of int;\nemit t <- 10 / (len(input.cells) - 1);\n"},
			codes.InvalidArgument, []string{"script run-time error", `row "row001"`, "rt.szl:2:14:", "division by zero"}},
		{"no table", &scriptpb.RunRequest{TableName: tableName("nope"), Source: "t: table sum of int;"}, codes.NotFound, []string{"nope"}},
		{"bad table name", &scriptpb.RunRequest{TableName: "t", Source: "t: table sum of int;"}, codes.InvalidArgument, []string{"table_name"}},
		{"bad filter bytes", &scriptpb.RunRequest{Source: "t: table sum of int;", Filter: []byte{0xff, 0xff}}, codes.InvalidArgument, []string{"filter"}},
		{"inverted range", &scriptpb.RunRequest{Source: "t: table sum of int;", StartKey: []byte("b"), EndKey: []byte("a")}, codes.InvalidArgument, []string{"end_key"}},
		{"prefix and start", &scriptpb.RunRequest{Source: "t: table sum of int;", StartKey: []byte("b"), RowPrefix: []byte("a")}, codes.InvalidArgument, []string{"row_prefix"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.req.TableName == "" {
				tc.req.TableName = tableName("t")
			}
			_, _, err := runScript(e.ctx, sc, tc.req)
			wantCode(t, err, tc.code, tc.parts...)
		})
	}
	// Run-time errors are counted apart from the rest.
	if n := errorCount(t, e, "runtime"); n != 1 {
		t.Errorf("runtime errors counted %v, want 1", n)
	}
}

// errorCount returns how many failed runs of kind the env's registry
// holds: the service registers its metrics with the Host's registerer.
func errorCount(t *testing.T, e *testEnv, kind string) float64 {
	t.Helper()
	mfs, err := e.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "tabula_script_errors_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if m.GetLabel()[0].GetValue() == kind {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// TestScriptLimits runs an endless loop, a memory bomb, a deep recursion
// and a slow script: each ends its own RPC with RESOURCE_EXHAUSTED naming
// the bound, the server's maxima clamp what the request asks, and reads
// running meanwhile succeed.
func TestScriptLimits(t *testing.T) {
	e, sc := newScriptEnv(t, ScriptOptions{MaxLimits: scripts.Limits{Steps: 200_000, Memory: 8 << 20, Depth: 500, Time: 5 * time.Second}})
	tbl := e.createTable(tableDef{name: "t", families: []string{"f", "g"}})
	fillPages(t, e, tbl, 5)

	// Normal reads run all along, concurrently with the runaways.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var reads int
	var readErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			n := 0
			err := tbl.ReadRows(e.ctx, bigtable.InfiniteRange(""), func(bigtable.Row) bool { n++; return true })
			if err == nil && n != 5 {
				err = fmt.Errorf("read %d rows, want 5", n)
			}
			if err != nil {
				readErr = err
				return
			}
			reads++
		}
	}()

	for _, tc := range []struct {
		name   string
		src    string
		limits *scriptpb.Limits
		parts  []string
	}{
		{"endless loop", "while (true) {}", nil, []string{"loop.szl:1:", "step limit (200000)"}},
		{"steps asked above the maximum are clamped", "while (true) {}", &scriptpb.Limits{Steps: 1 << 50}, []string{"step limit (200000)"}},
		{"steps asked below the maximum", "while (true) {}", &scriptpb.Limits{Steps: 1000}, []string{"step limit (1000)"}},
		{"memory bomb", "s: string = \"x\";\nwhile (true) s = s + s;", &scriptpb.Limits{Steps: 1 << 40}, []string{"memory limit"}},
		{"deep recursion", "f: function(n: int): int { return f(n + 1); };\nx: int = f(0);", nil, []string{"call depth limit (500)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := runScript(e.ctx, sc, &scriptpb.RunRequest{TableName: tableName("t"), Name: "loop.szl", Source: tc.src, Limits: tc.limits})
			wantCode(t, err, codes.ResourceExhausted, tc.parts...)
		})
	}
	close(stop)
	wg.Wait()
	if readErr != nil {
		t.Fatalf("a read during the runaway scripts failed: %v", readErr)
	}
	if reads == 0 {
		t.Fatal("no read completed while the scripts ran")
	}
	// And the script service itself still answers.
	_, last, err := runScript(e.ctx, sc, &scriptpb.RunRequest{TableName: tableName("t"), Source: sumScript})
	if err != nil {
		t.Fatal(err)
	}
	if got := decode(t, sumScript, last).Table("total").Entries[0].Value; got != int64(10) {
		t.Errorf("total after the runaways = %v, want 10", got)
	}
	if n := errorCount(t, e, "limit"); n != 5 {
		t.Errorf("limit errors counted %v, want 5", n)
	}
}

// TestScriptWallTime stops a script that is within its steps but past
// its wall time, the request's (below the server's) or the server's.
func TestScriptWallTime(t *testing.T) {
	e, sc := newScriptEnv(t, ScriptOptions{MaxLimits: scripts.Limits{Steps: 1 << 50, Time: 300 * time.Millisecond}})
	tbl := e.createTable(tableDef{name: "t", families: []string{"f", "g"}})
	fillPages(t, e, tbl, 2)
	for _, lim := range []*scriptpb.Limits{{TimeMillis: 30}, {TimeMillis: 1 << 40}} {
		_, _, err := runScript(e.ctx, sc, &scriptpb.RunRequest{TableName: tableName("t"), Source: "while (true) {}", Limits: lim})
		wantCode(t, err, codes.ResourceExhausted, "time limit")
	}
}

// TestScriptListTablets lists the tablets of a split table.
func TestScriptListTablets(t *testing.T) {
	e, sc := newScriptEnv(t, ScriptOptions{})
	e.createTable(tableDef{name: "t", families: []string{"f"}, splits: []string{"g", "n"}})
	resp, err := sc.ListTablets(e.ctx, &scriptpb.ListTabletsRequest{TableName: tableName("t")})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, tb := range resp.GetTablets() {
		got = append(got, fmt.Sprintf("[%s,%s)", tb.GetStartKey(), tb.GetEndKey()))
	}
	if s := strings.Join(got, " "); s != "[,g) [g,n) [n,)" {
		t.Errorf("tablets = %s", s)
	}
	_, err = sc.ListTablets(e.ctx, &scriptpb.ListTabletsRequest{TableName: tableName("nope")})
	wantCode(t, err, codes.NotFound)
}

// TestScriptMaxRuns: with one slot, a second run waits while a slow one
// evaluates, and gives up at its own deadline; once the slot is free it
// runs.
func TestScriptMaxRuns(t *testing.T) {
	e, sc := newScriptEnv(t, ScriptOptions{MaxRuns: 1, MaxLimits: scripts.Limits{Steps: 1 << 50}})
	tbl := e.createTable(tableDef{name: "t", families: []string{"f", "g"}})
	fillPages(t, e, tbl, 2)
	slow := make(chan error, 1)
	go func() {
		_, _, err := runScript(e.ctx, sc, &scriptpb.RunRequest{TableName: tableName("t"), Source: "while (true) {}", Limits: &scriptpb.Limits{TimeMillis: 1500}})
		slow <- err
	}()
	// Wait until the slow run holds the slot.
	for deadline := time.Now().Add(10 * time.Second); gaugeValue(t, e, "tabula_script_runs_active") != 1; {
		if time.Now().After(deadline) {
			t.Fatal("the slow run never started")
		}
		time.Sleep(5 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(e.ctx, 100*time.Millisecond)
	defer cancel()
	_, _, err := runScript(ctx, sc, &scriptpb.RunRequest{TableName: tableName("t"), Source: sumScript})
	wantCode(t, err, codes.DeadlineExceeded)
	wantCode(t, <-slow, codes.ResourceExhausted, "time limit")
	if _, _, err := runScript(e.ctx, sc, &scriptpb.RunRequest{TableName: tableName("t"), Source: sumScript}); err != nil {
		t.Fatalf("run after the slot freed: %v", err)
	}
}

// gaugeValue reads a gauge without labels from the env's registry.
func gaugeValue(t *testing.T, e *testEnv, name string) float64 {
	t.Helper()
	mfs, err := e.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	return -1
}
