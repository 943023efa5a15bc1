package tabletserver

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc/codes"

	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/commitlog"
	"github.com/tabuladb/tabula/storage/meta"
	"github.com/tabuladb/tabula/storage/tablet"
	"github.com/tabuladb/tabula/storage/tabletdesc"
)

// TestAutoSplitStitchedReads writes a table past a small split size while
// reading it, waits for the background loop to split it into several
// tablets, and checks that clients never saw a split: every write
// succeeded, scans across tablets are whole and ordered, forward and
// reverse, and SampleRowKeys describes the tablets.
func TestAutoSplitStitchedReads(t *testing.T) {
	e := newTestEnv(t, HostOptions{SplitBytes: 96 << 10, MemtableBytes: 32 << 10, SplitCheckInterval: 20 * time.Millisecond},
		DataOptions{SampleBytes: 16 << 10})
	tbl := e.createTable(tableDef{name: "t", families: []string{"f"}})
	ctx := e.ctx
	const rows = 3000
	key := func(i int) string { return fmt.Sprintf("row%05d", i) }
	val := bytes.Repeat([]byte("v"), 200)

	// Readers run during the writes and the splits.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	readErrs := make(chan error, 4)
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				prev := ""
				err := tbl.ReadRows(ctx, bigtable.InfiniteRange(""), func(r bigtable.Row) bool {
					if r.Key() <= prev {
						readErrs <- fmt.Errorf("scan out of order: %q after %q", r.Key(), prev)
						return false
					}
					prev = r.Key()
					return true
				})
				if err != nil {
					readErrs <- err
					return
				}
			}
		}()
	}
	// A counter in the middle of the table, incremented while its tablet
	// splits: read-modify-write must neither fail nor apply twice.
	const increments = 150
	wg.Add(1)
	go func() {
		defer wg.Done()
		for range increments {
			rmw := bigtable.NewReadModifyWrite()
			rmw.Increment("f", "n", 1)
			if _, err := tbl.ApplyReadModifyWrite(ctx, "row01500x", rmw); err != nil {
				readErrs <- fmt.Errorf("increment: %w", err)
				return
			}
		}
	}()
	for start := 0; start < rows; start += 100 {
		var keys []string
		var muts []*bigtable.Mutation
		for i := start; i < start+100; i++ {
			m := bigtable.NewMutation()
			m.Set("f", "q", ts(1), val)
			keys = append(keys, key(i))
			muts = append(muts, m)
		}
		errs, err := tbl.ApplyBulk(ctx, keys, muts)
		if err != nil || errs != nil {
			t.Fatalf("bulk write at %d: %v %v", start, err, errs)
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for len(e.host.TableTablets(meta.TableID{Instance: testInstance, Table: "t"})) < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("table did not split: %d tablet(s)", len(e.host.TableTablets(meta.TableID{Instance: testInstance, Table: "t"})))
		}
		time.Sleep(20 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	select {
	case err := <-readErrs:
		t.Fatalf("reader during splits: %v", err)
	default:
	}

	counter, err := tbl.ReadRow(ctx, "row01500x", bigtable.RowFilter(bigtable.LatestNFilter(1)))
	if err != nil || len(counter["f"]) != 1 || binary.BigEndian.Uint64(counter["f"][0].Value) != increments {
		t.Fatalf("counter after %d increments across splits: %v %v", increments, counter, err)
	}
	m := bigtable.NewMutation()
	m.DeleteRow()
	if err := tbl.Apply(ctx, "row01500x", m); err != nil {
		t.Fatal(err)
	}

	infos := e.host.TableTablets(meta.TableID{Instance: testInstance, Table: "t"})
	// About 700 KB of rows at 96 KiB per tablet: a split child must not
	// count the files it shares with its sibling as its own and split on.
	if len(infos) > 40 {
		t.Fatalf("%d tablets for about 700 KB split at 96 KiB: splits ran away", len(infos))
	}
	t.Logf("%d tablets", len(infos))
	var want []string
	for i := range rows {
		want = append(want, key(i))
	}
	if got := keysOf(t, e, tbl, bigtable.InfiniteRange("")); got != strings.Join(want, ",") {
		t.Fatalf("forward scan over %d tablets is not every row in order (%d bytes)", len(infos), len(got))
	}
	rev := slices.Clone(want)
	slices.Reverse(rev)
	if got := keysOf(t, e, tbl, bigtable.InfiniteRange(""), bigtable.ReverseScan()); got != strings.Join(rev, ",") {
		t.Fatalf("reverse scan over %d tablets is not every row in reverse order", len(infos))
	}
	// A range that crosses a tablet boundary, both ways, with a limit.
	b := string(infos[1].Start)
	if got := keysOf(t, e, tbl, bigtable.InfiniteRange(""), bigtable.LimitRows(2), bigtable.RowFilter(bigtable.RowKeyFilter(".*"))); got != key(0)+","+key(1) {
		t.Fatalf("limit: %s", got)
	}
	i, _ := slices.BinarySearch(want, b) // the first row of the second tablet
	if i < 2 || i+2 >= len(want) {
		t.Fatalf("boundary %q too near the ends", b)
	}
	if got := keysOf(t, e, tbl, bigtable.NewRange(want[i-1], want[i+2])); got != strings.Join(want[i-1:i+2], ",") {
		t.Fatalf("range across the boundary %q: %s", b, got)
	}
	if got := keysOf(t, e, tbl, bigtable.NewRange(want[i-2], want[i+1]), bigtable.ReverseScan()); got != want[i]+","+want[i-1]+","+want[i-2] {
		t.Fatalf("reverse range across the boundary %q: %s", b, got)
	}
	// Point reads in every tablet.
	for _, ti := range infos {
		j, _ := slices.BinarySearch(want, string(ti.Start)) // the tablet's first row
		k := want[j]
		r, err := tbl.ReadRow(ctx, k)
		if err != nil || r.Key() != k {
			t.Fatalf("read %s: %v %v", k, r, err)
		}
	}

	// SampleRowKeys: ascending keys, every tablet boundary, offsets not
	// decreasing, the empty key last with the total.
	stream, err := e.stub.SampleRowKeys(ctx, &bigtablepb.SampleRowKeysRequest{TableName: tableName("t")})
	if err != nil {
		t.Fatal(err)
	}
	var samples []*bigtablepb.SampleRowKeysResponse
	for {
		s, err := stream.Recv()
		if err != nil {
			break
		}
		samples = append(samples, s)
	}
	if len(samples) < len(infos) {
		t.Fatalf("%d samples for %d tablets", len(samples), len(infos))
	}
	var total int64
	for _, ti := range infos {
		total += ti.Bytes
	}
	last := samples[len(samples)-1]
	if len(last.RowKey) != 0 || last.OffsetBytes < total/2 {
		t.Fatalf("last sample %q at %d, total stored %d", last.RowKey, last.OffsetBytes, total)
	}
	for j := 1; j < len(samples)-1; j++ {
		if bytes.Compare(samples[j].RowKey, samples[j-1].RowKey) <= 0 || samples[j].OffsetBytes < samples[j-1].OffsetBytes {
			t.Fatalf("samples out of order at %d: %q@%d after %q@%d", j, samples[j].RowKey, samples[j].OffsetBytes, samples[j-1].RowKey, samples[j-1].OffsetBytes)
		}
	}
	for _, ti := range infos[1:] {
		if !slices.ContainsFunc(samples, func(s *bigtablepb.SampleRowKeysResponse) bool { return bytes.Equal(s.RowKey, ti.Start) }) {
			t.Fatalf("tablet boundary %q missing from the samples", ti.Start)
		}
	}
	clientKeys, err := tbl.SampleRowKeys(ctx)
	// The client leaves out the final empty key.
	if err != nil || len(clientKeys) != len(samples)-1 {
		t.Fatalf("client SampleRowKeys: %d keys, %v", len(clientKeys), err)
	}
	if n := counterValue(t, e.host.metrics.splits); n < 2 {
		t.Fatalf("split counter %v", n)
	}
}

// TestHostAsTableHost covers the master's interface (master.TableHost):
// UpdateSchema, DropRowRange, DropTable, reopening a table whose tablets were split (on a local store,
// across a Host restart), and log truncation.
func TestHostAsTableHost(t *testing.T) {
	dir := t.TempDir()
	store, err := blob.NewLocal(dir + "/store")
	if err != nil {
		t.Fatal(err)
	}
	e := newTestEnv(t, HostOptions{Store: store}, DataOptions{})
	d := tableDef{name: "t", families: []string{"f"}, splits: []string{"m"}}
	tbl := e.createTable(d)
	ctx := e.ctx
	var keys []string
	var muts []*bigtable.Mutation
	for _, k := range []string{"a1", "a2", "b1", "m1", "n1", "z"} {
		m := bigtable.NewMutation()
		m.Set("f", "q", ts(1), []byte(k))
		keys = append(keys, k)
		muts = append(muts, m)
	}
	if errs, err := tbl.ApplyBulk(ctx, keys, muts); err != nil || errs != nil {
		t.Fatal(err, errs)
	}
	tm := e.tableMeta(d)
	id := tm.ID

	// New family through UpdateSchema (OpenTable of an open table is the same).
	tm.Families["g"] = tabletdesc.Family{GC: tabletdesc.GCPolicy{MaxVersions: 1}}
	if err := e.host.OpenTable(ctx, tm); err != nil {
		t.Fatal(err)
	}
	m := bigtable.NewMutation()
	m.Set("g", "q", ts(1), []byte("old"))
	m.Set("g", "q", ts(2), []byte("new"))
	if err := tbl.Apply(ctx, "n1", m); err != nil {
		t.Fatalf("write to the new family: %v", err)
	}
	if got := readAll(t, ctx, tbl, bigtable.RowList{"n1"}); got != "n1{f:q@1000=n1 g:q@2000=new}" {
		t.Fatalf("GC policy of the new family: %s", got)
	}

	// Dropping the family hides its cells at once and refuses writes to it.
	delete(tm.Families, "g")
	if err := e.host.UpdateSchema(ctx, tm); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, ctx, tbl, bigtable.RowList{"n1"}); got != "n1{f:q@1000=n1}" {
		t.Fatalf("after dropping family g: %s", got)
	}
	wantCode(t, tbl.Apply(ctx, "n1", m), codes.NotFound, "family")

	// A newer generation applies; an older one arriving after it (a
	// master's push overtaken by a server's own catalog read) changes
	// nothing.
	newer := tm
	newer.Families = maps.Clone(tm.Families)
	newer.Families["h"] = tabletdesc.Family{GC: tabletdesc.GCPolicy{MaxVersions: 1}}
	newer.Generation = tm.Generation + 1
	if err := e.host.UpdateSchema(ctx, newer); err != nil {
		t.Fatal(err)
	}
	if err := e.host.UpdateSchema(ctx, tm); err != nil {
		t.Fatal(err)
	}
	mh := bigtable.NewMutation()
	mh.Set("h", "q", ts(3), []byte("h"))
	if err := tbl.Apply(ctx, "n1", mh); err != nil {
		t.Fatalf("write to the family of the newer schema after an older one arrived: %v", err)
	}
	tm = newer

	// Split one tablet by hand, then DropRowRange across both tablets.
	if err := e.host.SplitTablet(ctx, id, "t-0"); err != nil {
		t.Fatal(err)
	}
	if n := len(e.host.TableTablets(id)); n != 3 {
		t.Fatalf("%d tablets after a split, want 3", n)
	}
	if err := e.host.DropRowRange(ctx, tm, []byte("a")); err != nil {
		t.Fatal(err)
	}
	if got := keysOf(t, e, tbl, bigtable.InfiniteRange("")); got != "b1,m1,n1,z" {
		t.Fatalf("after dropping prefix a: %s", got)
	}

	// Restart: the split is found through the tablets' states.
	if err := e.host.DropTable(ctx, tm); err != nil {
		t.Fatal(err)
	}
	_, err = tbl.ReadRow(ctx, "b1")
	wantCode(t, err, codes.NotFound)
	if err := e.host.OpenTable(ctx, tm); err != nil {
		t.Fatal(err)
	}
	if n := len(e.host.TableTablets(id)); n != 3 {
		t.Fatalf("%d tablets after reopening, want 3", n)
	}
	if got := keysOf(t, e, tbl, bigtable.InfiniteRange("")); got != "b1,m1,n1,z" {
		t.Fatalf("after reopening: %s", got)
	}
	if err := e.host.DropRowRange(ctx, tm, nil); err != nil {
		t.Fatal(err)
	}
	if got := keysOf(t, e, tbl, bigtable.InfiniteRange("")); got != "" {
		t.Fatalf("after dropping every row: %s", got)
	}

	// Every tablet flushed on close, so the log can go up to the tail.
	before := e.log.Tail()
	if err := e.host.TruncateLog(ctx); err != nil {
		t.Fatal(err)
	}
	if before.Compare(tabletdesc.LogPosition{}) <= 0 {
		t.Fatalf("log tail %v", before)
	}
	if e.host.TableTablets(meta.TableID{Instance: testInstance, Table: "nope"}) != nil {
		t.Fatal("tablets of a table that is not open")
	}
}

// TestRestartRecoversFromLog writes through one Host, abandons it without
// closing the tablets (as a crash would, the log stays), and opens the table
// on a new Host over the same store and log.
func TestRestartRecoversFromLog(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	store := blob.NewMemory()
	logOpts := commitlog.Options{Dir: t.TempDir()}
	lg, err := commitlog.Open(ctx, logOpts)
	if err != nil {
		t.Fatal(err)
	}
	h, err := NewHost(ctx, HostOptions{Store: store, Log: lg, LogOptions: logOpts, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	tm := meta.Table{ID: meta.TableID{Instance: "i", Table: "t"}, Families: map[string]tabletdesc.Family{"f": {}},
		Tablets: []meta.TabletRef{{ID: "t-0"}}}
	if err := h.OpenTable(ctx, tm); err != nil {
		t.Fatal(err)
	}
	ds := NewDataService(h, DataOptions{})
	_, err = ds.MutateRow(ctx, &bigtablepb.MutateRowRequest{TableName: tm.ID.FullName("p"), RowKey: []byte("r"),
		Mutations: []*bigtablepb.Mutation{{Mutation: &bigtablepb.Mutation_SetCell_{SetCell: &bigtablepb.Mutation_SetCell{
			FamilyName: "f", ColumnQualifier: []byte("q"), TimestampMicros: 1000, Value: []byte("durable")}}}}})
	if err != nil {
		t.Fatal(err)
	}
	// Crash: stop the background loop but do not close (flush) the tablets.
	close(h.stop)
	<-h.done
	if err := lg.Close(); err != nil {
		t.Fatal(err)
	}

	lg2, err := commitlog.Open(ctx, logOpts)
	if err != nil {
		t.Fatal(err)
	}
	defer lg2.Close()
	h2, err := NewHost(ctx, HostOptions{Store: store, Log: lg2, LogOptions: logOpts, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer h2.Close()
	if err := h2.OpenTable(ctx, tm); err != nil {
		t.Fatal(err)
	}
	var got []string
	err = h2.scan(ctx, tm.ID, nil, nil, false, tablet.ReadOptions{}, func(r cell.Row) error {
		for _, c := range r.Cells {
			got = append(got, string(r.Key)+"="+string(c.Value))
		}
		return nil
	})
	if err != nil || len(got) != 1 || got[0] != "r=durable" {
		t.Fatalf("after restart: %v %v", got, err)
	}
}

func TestMetrics(t *testing.T) {
	e := newTestEnv(t, HostOptions{}, DataOptions{})
	tbl := filterData(t, e)
	if got := readAll(t, e.ctx, tbl, bigtable.RowList{"s1"}); got != "s1{b:q@1000=q1}" {
		t.Fatal(got)
	}
	_, _ = e.client.Open("missing").ReadRow(e.ctx, "r")
	if n := counterValue(t, e.host.metrics.requests.WithLabelValues("MutateRow", "OK")); n != 3 {
		t.Fatalf("MutateRow OK count %v, want 3", n)
	}
	if n := counterValue(t, e.host.metrics.requests.WithLabelValues("ReadRows", "NotFound")); n != 1 {
		t.Fatalf("ReadRows NotFound count %v, want 1", n)
	}
	if n := counterValue(t, e.host.metrics.rowsRead); n != 1 {
		t.Fatalf("rows read %v", n)
	}
	checkExported(t, e, "tabula_requests_total", "tabula_request_duration_seconds", "tabula_tablets", "tabula_memtable_bytes",
		"tabula_compactions_total", "tabula_cache_requests_total", "tabula_written_bytes_total", "tabula_read_bytes_total")
}

// checkExported fails t unless e's registry exports every metric named.
func checkExported(t *testing.T, e *testEnv, names ...string) {
	t.Helper()
	mfs, err := e.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	exported := map[string]bool{}
	for _, mf := range mfs {
		exported[mf.GetName()] = true
	}
	for _, n := range names {
		if !exported[n] {
			t.Errorf("metric %s not exported", n)
		}
	}
}

// counterValue reads a counter's value.
func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// TestLogTruncation checks that truncation keeps what the least flushed
// tablet needs: segments go only once every tablet has flushed past them,
// and a crash after truncation loses nothing.
func TestLogTruncation(t *testing.T) {
	// No tablet is flushed for holding old segments here (see
	// TestLogTruncationReleasesOldSegments).
	e := newLogTruncationEnv(t, 1000)
	ctx, h, tm := e.ctx, e.h, e.tm
	var keys []string
	for i := range 100 {
		keys = append(keys, fmt.Sprintf("a%03d", i), fmt.Sprintf("z%03d", i))
	}
	e.write(keys...)
	st, err := h.table(tm.ID)
	if err != nil {
		t.Fatal(err)
	}
	tabs := st.list()
	n0 := e.segments()
	if n0 < 5 {
		t.Fatalf("only %d log segments", n0)
	}
	// Only the first tablet flushed: the second still needs every segment.
	if err := tabs[0].Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := h.TruncateLog(ctx); err != nil {
		t.Fatal(err)
	}
	if n := e.segments(); n != n0 {
		t.Fatalf("truncation with an unflushed tablet: %d segments, had %d", n, n0)
	}
	if err := tabs[1].Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := h.TruncateLog(ctx); err != nil {
		t.Fatal(err)
	}
	if n := e.segments(); n >= n0 {
		t.Fatalf("truncation after every tablet flushed: %d segments, had %d", n, n0)
	}
	// More writes, then a crash: they come back from what the log kept.
	e.write("b1", "y1")
	e.crashAndCount(len(keys) + 2)
}

// TestLogTruncationReleasesOldSegments has one tablet take a single write
// and the other a stream of them: truncation flushes the cold tablet,
// whose redo point would otherwise keep every segment, and the log shrinks
// to the last few segments; a crash after it loses nothing.
func TestLogTruncationReleasesOldSegments(t *testing.T) {
	const flushSegments = 3
	e := newLogTruncationEnv(t, flushSegments)
	e.write("b") // the first tablet's only write
	var keys []string
	for i := range 100 {
		keys = append(keys, fmt.Sprintf("z%03d", i))
	}
	e.write(keys...)
	if n := e.segments(); n < 2*flushSegments {
		t.Fatalf("only %d log segments", n)
	}
	if err := e.h.TruncateLog(e.ctx); err != nil {
		t.Fatal(err)
	}
	if n := e.segments(); n > flushSegments+1 {
		t.Fatalf("%d log segments after truncation, want at most %d", n, flushSegments+1)
	}
	if got := counterValue(t, e.h.metrics.logReleases); got < 1 {
		t.Fatalf("tabula_commitlog_release_flushes_total %v, want at least 1", got)
	}
	e.write("c")
	e.crashAndCount(len(keys) + 2)
}

// TestHostTruncatesAsObjectSegmentsEnd: with an object-store log whose
// segments end after a few flushes (commitlog.Options.SegmentObjects), a
// trickle of single-row writes — one object each — does not pile up
// objects until the next LogTruncateInterval (an hour here): the host
// truncates as the segments go by, flushing the tablets that pin them,
// and a crash afterwards still finds every row.
func TestHostTruncatesAsObjectSegmentsEnd(t *testing.T) {
	const segmentObjects, flushSegments = 4, 2
	e := newLogTruncationEnvWith(t, commitlog.Options{Prefix: "log", SegmentObjects: segmentObjects},
		HostOptions{LogFlushSegments: flushSegments, LogTruncateInterval: time.Hour})
	var keys []string
	for i := range 120 {
		keys = append(keys, fmt.Sprintf("k%03d", i))
	}
	e.write(keys...)
	// Past the segments a truncation keeps (flushSegments behind the
	// tail, plus the tail's) and those that end before the next
	// (flushSegments/2), with one of slack for the last check's timing.
	bound := (flushSegments + max(flushSegments/2, 1) + 2) * segmentObjects
	deadline := time.Now().Add(5 * time.Second)
	for e.logObjects() > bound {
		if time.Now().After(deadline) {
			t.Fatalf("%d log objects after %d writes of one object each, want at most %d", e.logObjects(), len(keys), bound)
		}
		e.write("kick") // the background loop looks at the log when written to
		time.Sleep(20 * time.Millisecond)
	}
	e.write("z")
	e.crashAndCount(len(keys) + 2)
}

// logTruncationEnv is a Host with a two-tablet table ([, m) and [m, )) and
// a commit log of 2 KiB segments in a directory of its own.
type logTruncationEnv struct {
	t       *testing.T
	ctx     context.Context
	store   blob.Store
	logOpts commitlog.Options
	lg      *commitlog.Log
	h       *Host
	ds      *DataService
	tm      meta.Table
}

func newLogTruncationEnv(t *testing.T, flushSegments int) *logTruncationEnv {
	return newLogTruncationEnvWith(t, commitlog.Options{Dir: t.TempDir(), SegmentBytes: 2048}, HostOptions{LogFlushSegments: flushSegments})
}

// newLogTruncationEnvWith is newLogTruncationEnv with the log of logOpts
// (a Store left nil is the env's store) and the Host options of opts.
func newLogTruncationEnvWith(t *testing.T, logOpts commitlog.Options, opts HostOptions) *logTruncationEnv {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	e := &logTruncationEnv{t: t, ctx: ctx, store: blob.NewMemory(), logOpts: logOpts}
	if e.logOpts.Dir == "" && e.logOpts.Store == nil {
		e.logOpts.Store = e.store
	}
	var err error
	if e.lg, err = commitlog.Open(ctx, e.logOpts); err != nil {
		t.Fatal(err)
	}
	opts.Store, opts.Log, opts.LogOptions, opts.Logger = e.store, e.lg, e.logOpts, quietLogger()
	e.h, err = NewHost(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	e.tm = meta.Table{ID: meta.TableID{Instance: "i", Table: "t"}, Families: map[string]tabletdesc.Family{"f": {}},
		Granularity: meta.GranularityMicros, Tablets: []meta.TabletRef{{ID: "t0", End: []byte("m")}, {ID: "t1", Start: []byte("m")}}}
	if err := e.h.OpenTable(ctx, e.tm); err != nil {
		t.Fatal(err)
	}
	e.ds = NewDataService(e.h, DataOptions{})
	return e
}

// logObjects counts the objects of an object-store log.
func (e *logTruncationEnv) logObjects() int {
	objs, err := e.logOpts.Store.List(e.ctx, e.logOpts.Prefix)
	if err != nil {
		e.t.Fatal(err)
	}
	return len(objs)
}

// segments counts the log's segment files.
func (e *logTruncationEnv) segments() int {
	ents, err := os.ReadDir(e.logOpts.Dir)
	if err != nil {
		e.t.Fatal(err)
	}
	return len(ents)
}

// write sets one cell of 40 times its key in each row.
func (e *logTruncationEnv) write(keys ...string) {
	e.t.Helper()
	for _, k := range keys {
		_, err := e.ds.MutateRow(e.ctx, &bigtablepb.MutateRowRequest{TableName: e.tm.ID.FullName("p"), RowKey: []byte(k),
			Mutations: []*bigtablepb.Mutation{{Mutation: &bigtablepb.Mutation_SetCell_{SetCell: &bigtablepb.Mutation_SetCell{
				FamilyName: "f", ColumnQualifier: []byte("q"), TimestampMicros: 1, Value: bytes.Repeat([]byte(k), 40)}}}}})
		if err != nil {
			e.t.Fatal(err)
		}
	}
}

// crashAndCount stops the Host without flushing, reopens the table on a
// new Host over the same log and store, and checks it holds want rows.
func (e *logTruncationEnv) crashAndCount(want int) {
	t, ctx := e.t, e.ctx
	close(e.h.stop)
	<-e.h.done
	if err := e.lg.Close(); err != nil {
		t.Fatal(err)
	}
	lg2, err := commitlog.Open(ctx, e.logOpts)
	if err != nil {
		t.Fatal(err)
	}
	defer lg2.Close()
	h2, err := NewHost(ctx, HostOptions{Store: e.store, Log: lg2, LogOptions: e.logOpts, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer h2.Close()
	if err := h2.OpenTable(ctx, e.tm); err != nil {
		t.Fatal(err)
	}
	n := 0
	if err := h2.scan(ctx, e.tm.ID, nil, nil, false, tablet.ReadOptions{}, func(cell.Row) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	if n != want {
		t.Fatalf("%d rows after truncation and a crash, want %d", n, want)
	}
}

// TestFlushCollectedMetric: a flush of a table whose family keeps one
// version leaves a row's two older versions out of its SSTable, and
// tabula_flush_collected_entries_total counts them for the table.
func TestFlushCollectedMetric(t *testing.T) {
	e := newTestEnv(t, HostOptions{}, DataOptions{})
	d := tableDef{name: "collected", families: []string{"f"}, gc: map[string]tabletdesc.GCPolicy{"f": {MaxVersions: 1}}}
	tbl := e.createTable(d)
	for ts := 1; ts <= 3; ts++ {
		m := bigtable.NewMutation()
		m.Set("f", "q", bigtable.Timestamp(ts*1000), []byte(fmt.Sprint("v", ts)))
		if err := tbl.Apply(e.ctx, "r", m); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.host.FlushTableStates(e.ctx, e.tableMeta(d)); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, e.ctx, tbl, bigtable.RowList{"r"}); got != "r{f:q@3000=v3}" {
		t.Fatalf("after the flush: %s", got)
	}
	mfs, err := e.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var got float64 = -1
	for _, mf := range mfs {
		if mf.GetName() != "tabula_flush_collected_entries_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "table" && strings.HasSuffix(l.GetValue(), "collected") {
					got = m.GetCounter().GetValue()
				}
			}
		}
	}
	if got != 2 {
		t.Fatalf("tabula_flush_collected_entries_total for the table = %v, want 2", got)
	}
}
