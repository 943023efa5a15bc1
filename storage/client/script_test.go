package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tabuladb/tabula/scripts"
	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/meta"
	"github.com/tabuladb/tabula/storage/tabletdesc"
	"github.com/tabuladb/tabula/storage/tabletserver"
	"github.com/tabuladb/tabula/storage/tabletserver/scriptpb"
)

// startServer serves a Host with table "t" (families f and g, tablets
// split at row010 and row020) holding rows row000..row029: each has
// f:size = its number, even ones also g:even = "yes". It returns a
// Client dialed to it.
func startServer(t *testing.T) *Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	host, err := tabletserver.NewHost(ctx, tabletserver.HostOptions{Store: blob.NewMemory(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	tbl := meta.Table{ID: meta.TableID{Instance: "dev", Table: "t"}, Families: map[string]tabletdesc.Family{"f": {}, "g": {}},
		Tablets: []meta.TabletRef{{ID: "t-0", End: []byte("row010")}, {ID: "t-1", Start: []byte("row010"), End: []byte("row020")}, {ID: "t-2", Start: []byte("row020")}}}
	if err := host.OpenTable(ctx, tbl); err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	bigtablepb.RegisterBigtableServer(srv, tabletserver.NewDataService(host, tabletserver.DataOptions{}))
	scriptpb.RegisterScriptsServer(srv, tabletserver.NewScriptService(host, tabletserver.ScriptOptions{MaxLimits: scripts.Limits{Steps: 100_000}}))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(lis)
	c, err := Dial(lis.Addr().String(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Close()
		srv.Stop()
		host.Close()
	})
	bt, err := bigtable.NewClientWithConfig(ctx, "tabula", "dev",
		bigtable.ClientConfig{MetricsProvider: bigtable.NoopMetricsProvider{}}, option.WithGRPCConn(c.cc))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 30 {
		m := bigtable.NewMutation()
		m.Set("f", "size", 1000, []byte(fmt.Sprint(i)))
		if i%2 == 0 {
			m.Set("g", "even", 1000, []byte("yes"))
		}
		if err := bt.Open("t").Apply(ctx, fmt.Sprintf("row%03d", i), m); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

const sumScript = `
total: table sum of int;
top: table maximum(3) of key: string weight n: int;
n: int = int(string(input.cells[0].value));
emit total <- n;
emit top <- string(input.key) weight n;
`

// perTablet is a locator that puts every tablet on its own "server"
// (all behind one connection), as a cluster would: one Run per tablet.
type perTablet struct{ inner locator }

func (p perTablet) tablets(ctx context.Context, table string, start, end []byte) ([]tabletLoc, error) {
	tabs, err := p.inner.tablets(ctx, table, start, end)
	for i := range tabs {
		tabs[i].server = fmt.Sprintf("server-%d", i)
	}
	return tabs, err
}

// TestRunScript runs a summary over ranges, on one server and fanned out
// to one "server" per tablet: the merged results are the same and exact.
func TestRunScript(t *testing.T) {
	c := startServer(t)
	ctx := context.Background()
	for _, split := range []bool{false, true} {
		if split {
			c.loc = perTablet{inner: c.loc}
		}
		for _, tc := range []struct {
			opts       ScriptOptions
			total      int64
			top        string
			runsSplit  int
			rowsWanted int64
		}{
			{ScriptOptions{}, 29 * 30 / 2, "row029 row028 row027", 3, 30},
			{ScriptOptions{Start: []byte("row005"), End: []byte("row015")}, (5 + 14) * 10 / 2, "row014 row013 row012", 2, 10},
			// [row02, row03) starts before row020: the middle tablet is asked too.
			{ScriptOptions{Prefix: []byte("row02")}, (20 + 29) * 10 / 2, "row029 row028 row027", 2, 10},
			{ScriptOptions{Start: []byte("row000"), End: []byte("row010")}, 45, "row009 row008 row007", 1, 10},
		} {
			var st ScriptStats
			tc.opts.Stats = &st
			res, err := c.RunScript(ctx, "t", sumScript, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			if got := res.Table("total").Entries[0].Value; got != tc.total {
				t.Errorf("split=%v %+v: total = %v, want %d", split, tc.opts, got, tc.total)
			}
			var top []string
			for _, v := range res.Table("top").Entries[0].Value.([]any) {
				top = append(top, v.(map[string]any)["key"].(string))
			}
			if got := strings.Join(top, " "); got != tc.top {
				t.Errorf("split=%v: top = %s, want %s", split, got, tc.top)
			}
			wantRuns := 1
			if split {
				wantRuns = tc.runsSplit
			}
			if st.Runs != wantRuns || st.Rows != tc.rowsWanted {
				t.Errorf("split=%v %+v: stats %+v, want %d runs, %d rows", split, tc.opts, st, wantRuns, tc.rowsWanted)
			}
		}
	}
}

// TestFilterRows reads the rows a filter script keeps, in key order
// across servers, with a RowFilter applied first, and stops when asked.
func TestFilterRows(t *testing.T) {
	c := startServer(t)
	c.loc = perTablet{inner: c.loc}
	ctx := context.Background()
	const src = `
# Rows whose size is a multiple of 7.
when (i: some int; input.cells[i].family == "f" && int(string(input.cells[i].value)) % 7 == 0)
    emit keep <- true;
`
	var keys []string
	filter := &bigtablepb.RowFilter{Filter: &bigtablepb.RowFilter_FamilyNameRegexFilter{FamilyNameRegexFilter: "f"}}
	res, err := c.FilterRows(ctx, "t", src, ScriptOptions{Filter: filter}, func(r Row) bool {
		keys = append(keys, string(r.Key))
		if len(r.Cells) != 1 || r.Cells[0].Family != "f" {
			t.Errorf("row %s: cells %v, want only f's", r.Key, r.Cells)
		}
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(keys, " "); got != "row000 row007 row014 row021 row028" {
		t.Errorf("kept %s", got)
	}
	if res == nil || len(res.Tables) != 0 {
		t.Errorf("result %v, want one with no tables (keep is not one)", res)
	}
	keys = nil
	res, err = c.FilterRows(ctx, "t", src, ScriptOptions{}, func(r Row) bool {
		keys = append(keys, string(r.Key))
		return len(keys) < 2
	})
	if err != nil || res != nil || len(keys) != 2 {
		t.Errorf("stopped read: keys %v, result %v, err %v", keys, res, err)
	}
	if _, err := c.FilterRows(ctx, "t", sumScript, ScriptOptions{}, func(Row) bool { return true }); err == nil || !strings.Contains(err.Error(), "not a filter script") {
		t.Errorf("FilterRows with an aggregate script: %v", err)
	}
}

// TestRunScriptErrors: compile errors come back typed before any RPC,
// limits and unknown tables as the server's status.
func TestRunScriptErrors(t *testing.T) {
	c := startServer(t)
	ctx := context.Background()
	_, err := c.RunScript(ctx, "t", "x: int = \"a\";\ny: bool = 1;", ScriptOptions{Name: "bad.szl"})
	var ce *scripts.CompileError
	if !errors.As(err, &ce) || len(ce.Diagnostics) != 2 || ce.Diagnostics[1].Line != 2 {
		t.Errorf("compile error = %v", err)
	}
	_, err = c.RunScript(ctx, "t", "t: table sum of int;\nwhile (true) emit t <- 1;", ScriptOptions{Name: "loop.szl"})
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "loop.szl:2:") || !strings.Contains(err.Error(), "step limit (100000)") {
		t.Errorf("runaway script: %v", err)
	}
	_, err = c.RunScript(ctx, "nope", sumScript, ScriptOptions{})
	if status.Code(err) != codes.NotFound {
		t.Errorf("unknown table: %v", err)
	}
	_, err = c.RunScript(ctx, "t", sumScript, ScriptOptions{Prefix: []byte("a"), Start: []byte("a")})
	if err == nil {
		t.Error("prefix with start accepted")
	}
}

// TestSpans groups tablets by server into clipped, contiguous spans and
// refuses a range the tablets do not cover.
func TestSpans(t *testing.T) {
	tl := func(s, e, server string) tabletLoc {
		t := tabletLoc{start: []byte(s), server: server}
		if e != "" {
			t.end = []byte(e)
		}
		return t
	}
	render := func(sp []span) string {
		var out []string
		for _, s := range sp {
			out = append(out, fmt.Sprintf("%s[%s,%s)x%d", s.server, s.start, s.end, s.tablets))
		}
		return strings.Join(out, " ")
	}
	b := func(s string) []byte {
		if s == "" {
			return nil
		}
		return []byte(s)
	}
	for _, tc := range []struct {
		tabs       []tabletLoc
		start, end string
		want       string
	}{
		{[]tabletLoc{tl("", "g", "a"), tl("g", "n", "a"), tl("n", "", "b")}, "", "", "a[,n)x2 b[n,)x1"},
		{[]tabletLoc{tl("", "g", "a"), tl("g", "n", "b"), tl("n", "", "a")}, "c", "p", "a[c,g)x1 b[g,n)x1 a[n,p)x1"},
		{[]tabletLoc{tl("g", "n", "b")}, "h", "i", "b[h,i)x1"},
		{[]tabletLoc{tl("", "g", "a"), tl("h", "", "a")}, "", "", "error"},
		{[]tabletLoc{tl("", "g", "a")}, "", "z", "error"},
	} {
		sp, err := spans(tc.tabs, b(tc.start), b(tc.end))
		got := render(sp)
		if err != nil {
			got = "error"
			if status.Code(err) != codes.Unavailable {
				t.Errorf("gap error %v is not UNAVAILABLE", err)
			}
		}
		if got != tc.want {
			t.Errorf("spans([%s,%s)) = %s, want %s", tc.start, tc.end, got, tc.want)
		}
	}
}
