package datasession_test

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tabuladb/tabula/internal/devtest"
	"github.com/tabuladb/tabula/storage/cluster"
)

var dev *devtest.Server

func TestMain(m *testing.M) {
	os.Exit(devtest.Main(cluster.DevConfig{HTTPAddr: "127.0.0.1:0"}, &dev, m.Run))
}

// sessionCalls scrapes the server's count of calls served on sessions.
func sessionCalls(t *testing.T, srv *devtest.Server, method string) int {
	t.Helper()
	resp, err := http.Get("http://" + srv.HTTPAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	n, err := devtest.SumMetric(resp.Body, "tabula_session_calls_total", `method="`+method+`"`)
	if err != nil {
		t.Fatal(err)
	}
	return int(n)
}

// sessionClient returns an official client that dials the server itself,
// once its single-row reads go on sessions (the client turns them on
// after its first poll of the configuration).
func sessionClient(t *testing.T, srv *devtest.Server, table string) *bigtable.Client {
	t.Helper()
	ctx := devtest.Context(t)
	c, err := srv.SessionClient(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	before := sessionCalls(t, srv, "ReadRow")
	deadline := time.Now().Add(30 * time.Second)
	for sessionCalls(t, srv, "ReadRow") == before {
		if time.Now().After(deadline) {
			t.Fatal("the official client never sent a ReadRow on a session")
		}
		if _, err := c.Open(table).ReadRow(ctx, "probe"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return c
}

// TestSessionReadsAndWritesMatchClassic: the official client's ReadRow
// and Apply on sessions answer and write what the classic calls do — rows
// with versions, families and a value split over several chunks; filters,
// including one that leaves nothing and ones that label cells; missing
// rows — and fail with the classic calls' codes.
func TestSessionReadsAndWritesMatchClassic(t *testing.T) {
	ctx := devtest.Context(t)
	const table = "sessions"
	dev.CreateTable(t, table, []string{"f", "g"})
	classic := dev.Data.Open(table)
	big := bytes.Repeat([]byte("0123456789abcdef"), 3<<20/16) // 3 MiB: four chunks of 1 MiB at most
	write := func(tbl *bigtable.Table, row string, m *bigtable.Mutation) {
		t.Helper()
		if err := tbl.Apply(ctx, row, m); err != nil {
			t.Fatalf("apply %s: %v", row, err)
		}
	}
	m := bigtable.NewMutation()
	m.Set("f", "a", 1000, []byte("one"))
	m.Set("f", "a", 2000, []byte("two"))
	m.Set("f", "b", 1000, []byte("b"))
	m.Set("g", "c", 3000, []byte("c"))
	write(classic, "r1", m)
	m = bigtable.NewMutation()
	m.Set("f", "big", 1000, big)
	m.Set("g", "small", 1000, []byte("s"))
	write(classic, "r2", m)

	sc := sessionClient(t, dev, table)
	st := sc.Open(table)
	reads := []struct {
		row  string
		opts []bigtable.ReadOption
	}{
		{"r1", nil},
		{"r2", nil},
		{"missing", nil},
		{"r1", []bigtable.ReadOption{bigtable.RowFilter(bigtable.LatestNFilter(1))}},
		{"r1", []bigtable.ReadOption{bigtable.RowFilter(bigtable.FamilyFilter("g"))}},
		{"r1", []bigtable.ReadOption{bigtable.RowFilter(bigtable.ChainFilters(bigtable.ColumnFilter("a"), bigtable.StripValueFilter()))}},
		{"r1", []bigtable.ReadOption{bigtable.RowFilter(bigtable.ColumnFilter("nothing"))}},
		{"r2", []bigtable.ReadOption{bigtable.RowFilter(bigtable.ColumnFilter("big"))}},
		// Labels, and an interleave that returns every cell twice.
		{"r1", []bigtable.ReadOption{bigtable.RowFilter(bigtable.InterleaveFilters(
			bigtable.ChainFilters(bigtable.FamilyFilter("f"), bigtable.LabelFilter("x")),
			bigtable.ChainFilters(bigtable.ColumnFilter("c"), bigtable.LabelFilter("y"))))}},
		{"r1", []bigtable.ReadOption{bigtable.RowFilter(bigtable.InterleaveFilters(bigtable.LabelFilter("x"), bigtable.LabelFilter("y")))}},
	}
	before := sessionCalls(t, dev, "ReadRow")
	for i, r := range reads {
		want, err := classic.ReadRow(ctx, r.row, r.opts...)
		if err != nil {
			t.Fatal(err)
		}
		got, err := st.ReadRow(ctx, r.row, r.opts...)
		if err != nil {
			t.Fatalf("read %d (%s) on a session: %v", i, r.row, err)
		}
		if g, w := fmt.Sprint(got), fmt.Sprint(want); g != w {
			t.Errorf("read %d (%s): session %.300s, classic %.300s", i, r.row, g, w)
		}
	}
	if n := sessionCalls(t, dev, "ReadRow") - before; n < len(reads) {
		t.Errorf("%d reads went on sessions, want %d", n, len(reads))
	}
	if got, _ := st.ReadRow(ctx, "r2"); len(got["f"]) != 1 || !bytes.Equal(got["f"][0].Value, big) {
		t.Errorf("the 3 MiB value came back wrong from a session")
	}

	// Writes on the session, read back classically.
	before = sessionCalls(t, dev, "MutateRow")
	m = bigtable.NewMutation()
	m.Set("f", "a", 3000, []byte("three"))
	m.DeleteCellsInColumn("f", "b")
	write(st, "r1", m)
	m = bigtable.NewMutation()
	m.Set("g", "new", 1000, []byte("n"))
	write(st, "r3", m)
	if n := sessionCalls(t, dev, "MutateRow") - before; n != 2 {
		t.Errorf("%d writes went on sessions, want 2", n)
	}
	got, err := classic.ReadRow(ctx, "r1", bigtable.RowFilter(bigtable.FamilyFilter("f")))
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != `map[f:[{r1 f:a 3000 [116 104 114 101 101] []} {r1 f:a 2000 [116 119 111] []} {r1 f:a 1000 [111 110 101] []}]]` {
		t.Errorf("r1 after the session's write: %v", got)
	}
	if got, err := classic.ReadRow(ctx, "r3"); err != nil || string(got["g"][0].Value) != "n" {
		t.Errorf("r3 after the session's write: %v, %v", got, err)
	}

	// Errors: what the classic calls answer.
	bad := bigtable.NewMutation()
	bad.Set("nofamily", "q", 1000, []byte("x"))
	errWant := classic.Apply(ctx, "r4", bad)
	errGot := st.Apply(ctx, "r4", bad)
	if errWant == nil || status.Code(errGot) != status.Code(errWant) {
		t.Errorf("a write to a missing family: session %v, classic %v", errGot, errWant)
	}
	if row, err := classic.ReadRow(ctx, "r4"); err != nil || row != nil {
		t.Errorf("the refused write left %v (%v)", row, err)
	}
	_, errWant = dev.Data.Open("nosuchtable").ReadRow(ctx, "r1")
	_, errGot = sc.Open("nosuchtable").ReadRow(ctx, "r1")
	if status.Code(errWant) != codes.NotFound || status.Code(errGot) != codes.NotFound {
		t.Errorf("a read of a missing table: session %v, classic %v; want NotFound", errGot, errWant)
	}
}

// TestSessionAuthorizedView: a session of an authorized view reads and
// writes only the view's part, as the classic calls naming the view do.
func TestSessionAuthorizedView(t *testing.T) {
	ctx := devtest.Context(t)
	const table, view = "sessionview", "onlyf"
	dev.CreateTable(t, table, []string{"f", "g"})
	m := bigtable.NewMutation()
	m.Set("f", "a", 1000, []byte("fa"))
	m.Set("g", "b", 1000, []byte("gb"))
	if err := dev.Data.Open(table).Apply(ctx, "v1", m); err != nil {
		t.Fatal(err)
	}
	if err := dev.Admin.CreateAuthorizedView(ctx, &bigtable.AuthorizedViewConf{
		TableID: table, AuthorizedViewID: view,
		AuthorizedView: &bigtable.SubsetViewConf{RowPrefixes: [][]byte{[]byte("v")}, FamilySubsets: map[string]bigtable.FamilySubset{"f": {QualifierPrefixes: [][]byte{{}}}}},
	}); err != nil {
		t.Fatal(err)
	}
	sc := sessionClient(t, dev, table)
	before := sessionCalls(t, dev, "ReadRow")
	want, err := dev.Data.OpenAuthorizedView(table, view).ReadRow(ctx, "v1")
	if err != nil {
		t.Fatal(err)
	}
	var got bigtable.Row
	deadline := time.Now().Add(30 * time.Second)
	for sessionCalls(t, dev, "ReadRow") == before {
		// The view's session pool opens on its first call; the client
		// routes by the same configuration.
		if time.Now().After(deadline) {
			t.Fatal("no authorized-view read went on a session")
		}
		if got, err = sc.OpenAuthorizedView(table, view).ReadRow(ctx, "v1"); err != nil {
			t.Fatal(err)
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) || len(got["g"]) != 0 || len(got["f"]) != 1 {
		t.Errorf("view read on a session %v, classic %v", got, want)
	}
	out := bigtable.NewMutation()
	out.Set("g", "b", 2000, []byte("outside"))
	errWant := dev.Data.OpenAuthorizedView(table, view).Apply(ctx, "v1", out)
	errGot := sc.OpenAuthorizedView(table, view).Apply(ctx, "v1", out)
	if errWant == nil || status.Code(errGot) != status.Code(errWant) {
		t.Errorf("a write outside the view: session %v, classic %v", errGot, errWant)
	}
}

// TestStopEndsSessions: a server stopping tells its sessions to go away,
// so that its graceful stop does not wait for the clients to close them
// (it would until its stop timeout, here a minute).
func TestStopEndsSessions(t *testing.T) {
	ctx := devtest.Context(t)
	srv, err := devtest.Start(ctx, cluster.DevConfig{HTTPAddr: "127.0.0.1:0", StopTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	srv.CreateTable(t, "t", []string{"f"})
	sessionClient(t, srv, "t") // open sessions, left open
	start := time.Now()
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("the stop took %v with sessions open: it waited for them", d)
	}
}

// TestClassicOnlyKeepsClientsOffSessions: with ClassicOnly the client's
// reads stay ReadRows calls.
func TestClassicOnlyKeepsClientsOffSessions(t *testing.T) {
	ctx := devtest.Context(t)
	srv, err := devtest.Start(ctx, cluster.DevConfig{HTTPAddr: "127.0.0.1:0", ClassicOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	srv.CreateTable(t, "t", []string{"f"})
	c, err := srv.SessionClient(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for range 50 {
		if _, err := c.Open("t").ReadRow(ctx, "r"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := sessionCalls(t, srv, "ReadRow"); n != 0 {
		t.Errorf("%d reads went on sessions of a classic-only server", n)
	}
}
