package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/commitlog"
	"github.com/tabuladb/tabula/storage/coord"
	"github.com/tabuladb/tabula/storage/master"
	"github.com/tabuladb/tabula/storage/master/assign"
	"github.com/tabuladb/tabula/storage/meta"
	"github.com/tabuladb/tabula/storage/tablet"
	"github.com/tabuladb/tabula/storage/tabletdesc"
)

func newLocalStore(t *testing.T) blob.Store {
	t.Helper()
	store, err := blob.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return store
}

func put(t *testing.T, store blob.Store, names ...string) {
	t.Helper()
	for _, n := range names {
		if err := store.Put(context.Background(), n, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
}

func listNames(t *testing.T, store blob.Store, prefix string) []string {
	t.Helper()
	attrs, err := store.List(context.Background(), prefix)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, a := range attrs {
		out = append(out, a.Name)
	}
	return out
}

// sstName is an SSTable name of the shape tablets make, created at created.
func sstName(dir string, created time.Time, n int) string {
	return fmt.Sprintf("%s/%016x-%016x.sst", dir, created.UnixMicro(), n)
}

func saveStates(t *testing.T, states tablet.StateStore, sts ...tabletdesc.State) {
	t.Helper()
	for _, st := range sts {
		if err := states.Save(context.Background(), st); err != nil {
			t.Fatal(err)
		}
	}
}

func files(names ...string) map[string][]tabletdesc.FileMeta {
	var fs []tabletdesc.FileMeta
	for _, n := range names {
		fs = append(fs, tabletdesc.FileMeta{Name: n})
	}
	return map[string][]tabletdesc.FileMeta{"default": fs}
}

func TestReferencedFiles(t *testing.T) {
	ctx := context.Background()
	store := newLocalStore(t)
	states := tablet.NewBlobStateStore(store, StatePrefix)
	saveStates(t, states,
		tabletdesc.State{ID: "a", Groups: files("f1", "f2")},
		// A split parent still listed keeps its files; its children are
		// followed even though nobody lists them.
		tabletdesc.State{ID: "p", Groups: files("f3"), SplitInto: []string{"c1", "c2"}},
		tabletdesc.State{ID: "c1", Groups: map[string][]tabletdesc.FileMeta{"default": {{Name: "f3"}}, "lg": {{Name: "f4"}}}, SplitInto: []string{"g1"}},
		// c2 has no state: split but never loaded.
		tabletdesc.State{ID: "g1", Groups: files("f5")},
		// A cycle must not loop.
		tabletdesc.State{ID: "x", Groups: files("f6"), SplitInto: []string{"x"}},
		tabletdesc.State{ID: "unlisted", Groups: files("f7")},
	)
	referenced, err := master.ReferencedFiles(ctx, states, []string{"a", "p", "a", "never-loaded", "x"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, tf := range referenced {
		got = append(got, tf.Files...)
	}
	slices.Sort(got)
	got = slices.Compact(got)
	want := []string{"f1", "f2", "f3", "f4", "f5", "f6"}
	if !slices.Equal(got, want) {
		t.Fatalf("liveFiles = %v, want %v", got, want)
	}

	// A state that cannot be read aborts: its files would be lost.
	put(t, store, StatePrefix+"/bad.tablet")
	if _, err := master.ReferencedFiles(ctx, states, []string{"a", "bad"}); err == nil || !strings.Contains(err.Error(), "bad") {
		t.Fatalf("liveFiles with a corrupt state: err = %v, want an error naming the tablet", err)
	}
}

func TestCollectFiles(t *testing.T) {
	ctx := context.Background()
	store := newLocalStore(t)
	states := tablet.NewBlobStateStore(store, StatePrefix)
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	grace := 15 * time.Minute
	old, young := now.Add(-time.Hour), now.Add(-grace+time.Second)
	dir := "tables/inst/t"
	var (
		liveOld   = sstName(dir, old, 1)
		childOnly = sstName(dir, old, 2) // referenced only by a split child
		deadOld   = sstName(dir, old, 3)
		deadYoung = sstName(dir, young, 4)
		deadEdge  = sstName(dir, now.Add(-grace), 5) // exactly grace old
		servedBy  = sstName(dir, old, 6)             // a tablet only a live server reports
		notSST    = dir + "/notes.txt"
		otherDir  = sstName("elsewhere", old, 7)
	)
	put(t, store, liveOld, childOnly, deadOld, deadYoung, deadEdge, servedBy, notSST, otherDir)
	saveStates(t, states,
		tabletdesc.State{ID: "t1", Groups: files(liveOld), SplitInto: []string{"t1a"}},
		tabletdesc.State{ID: "t1a", Groups: files(childOnly)},
		tabletdesc.State{ID: "s1", Groups: files(servedBy)},
	)
	deleted, err := collectFiles(ctx, store, states, []string{"t1", "s1"}, grace, now)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(deleted)
	if want := []string{deadOld, deadEdge}; !slices.Equal(deleted, sorted(want)) {
		t.Fatalf("deleted %v, want %v", deleted, sorted(want))
	}
	got := listNames(t, store, "")
	for _, n := range []string{liveOld, childOnly, deadYoung, servedBy, notSST, otherDir} {
		if !slices.Contains(got, n) {
			t.Errorf("%s was deleted", n)
		}
	}
	for _, n := range deleted {
		if slices.Contains(got, n) {
			t.Errorf("%s reported deleted but still there", n)
		}
	}

	// An unreadable state deletes nothing.
	put(t, store, StatePrefix+"/bad.tablet")
	another := sstName(dir, old, 8)
	put(t, store, another)
	if d, err := collectFiles(ctx, store, states, []string{"t1", "bad"}, grace, now); err == nil || len(d) > 0 {
		t.Fatalf("collectFiles with a corrupt state = %v, %v; want an error and nothing deleted", d, err)
	}
	if !slices.Contains(listNames(t, store, dir), another) {
		t.Fatal("a file was deleted although a state could not be read")
	}
}

func sorted(s []string) []string { return slices.Sorted(slices.Values(s)) }

func TestLogNameMatchesPrefixes(t *testing.T) {
	for _, s := range []string{"127.0.0.1:7000/0a1b2c3d4e5f", "[::1]:7000/ff", "host_x:1/00"} {
		if got, want := LogsPrefix+logName(s), LogPrefix(s); got != want {
			t.Errorf("LogsPrefix+logName(%q) = %q, LogPrefix = %q", s, got, want)
		}
		if got, want := SortedLogsPrefix+logName(s), SortedLogPrefix(s); got != want {
			t.Errorf("SortedLogsPrefix+logName(%q) = %q, SortedLogPrefix = %q", s, got, want)
		}
	}
}

// TestListLogsFindsCommitLog checks that the collector finds a real commit
// log, as a tablet server writes it, and its sorted copy, as log recovery
// writes it, under the server's logName.
func TestListLogsFindsCommitLog(t *testing.T) {
	ctx := context.Background()
	store := newLocalStore(t)
	server := NewServerName("127.0.0.1:7000")
	other := server + "0" // a name its logName is a prefix of
	for _, s := range []string{server, other} {
		l, err := commitlog.Open(ctx, commitlog.Options{Store: store, Prefix: LogPrefix(s)})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.Write(ctx, commitlog.Record{Tablet: "t", FirstSeq: 1, Mutation: cell.RowMutation{Row: []byte("r"), Mutations: []cell.Mutation{cell.Set("f", []byte("q"), 1, []byte("v"))}}}); err != nil {
			t.Fatal(err)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := commitlog.Sort(ctx, commitlog.Options{Store: store, Prefix: LogPrefix(server)}, commitlog.SortedLog{Store: store, Prefix: SortedLogPrefix(server)}); err != nil {
		t.Fatal(err)
	}
	put(t, store, LogsPrefix+"stray")
	logs, err := listLogs(ctx, store)
	if err != nil {
		t.Fatal(err)
	}
	if len(logs) != 2 {
		t.Fatalf("listLogs found logs %v, want 2", logs)
	}
	objs := logs[logName(server)]
	var names []string
	for _, o := range objs {
		names = append(names, o.Name)
	}
	if len(names) != 2 || !strings.HasPrefix(names[0], LogPrefix(server)+"/") || !strings.HasPrefix(names[1], SortedLogPrefix(server)+"/") {
		t.Fatalf("objects of %s: %v, want its log object and its sorted copy", server, names)
	}
	if len(logs[logName(other)]) != 1 {
		t.Fatalf("objects of %s: %v, want its one log object", other, logs[logName(other)])
	}
}

func TestDeadLogs(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	const grace = 15 * time.Minute
	old := now.Add(-time.Hour)
	tests := []struct {
		name    string
		written map[string]time.Time
		present []string
		last    []string
		want    []string
	}{
		{name: "nothing", want: nil},
		{
			name:    "dead, unreferenced and old",
			written: map[string]time.Time{"h:1_a": old},
			want:    []string{"h:1_a"},
		},
		{
			name:    "key present (held or released)",
			written: map[string]time.Time{"h:1_a": old},
			present: []string{"h:1/a"},
		},
		{
			name:    "last server of a tablet",
			written: map[string]time.Time{"h:1_a": old},
			last:    []string{"h:1/a"},
		},
		{
			name:    "younger than grace",
			written: map[string]time.Time{"h:1_a": now.Add(-grace + time.Nanosecond)},
		},
		{
			name:    "exactly grace old",
			written: map[string]time.Time{"h:1_a": now.Add(-grace)},
			want:    []string{"h:1_a"},
		},
		{
			name:    "written in the future (clock skew)",
			written: map[string]time.Time{"h:1_a": now.Add(time.Hour)},
		},
		{
			name:    "a server whose name maps to the same logName keeps it",
			written: map[string]time.Time{"h_1_a": old},
			present: []string{"h/1_a"},
		},
		{
			name:    "a name that extends another's is another log",
			written: map[string]time.Time{"h:1_a": old, "h:1_ab": old},
			present: []string{"h:1/ab"},
			want:    []string{"h:1_a"},
		},
		{
			name:    "several",
			written: map[string]time.Time{"h:3_c": old, "h:1_a": old, "h:2_b": old, "h:4_d": now, "h:5_e": old},
			present: []string{"h:2/b", "h:9/z"},
			last:    []string{"h:5/e"},
			want:    []string{"h:1_a", "h:3_c"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := deadLogs(tc.written, tc.present, tc.last, now, grace)
			if !slices.Equal(got, tc.want) {
				t.Fatalf("deadLogs = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestLastServers(t *testing.T) {
	got := lastServers([]assign.Tablet{{ID: "r", LastServer: "h:1/a"}, {ID: "u"}, {ID: "m", LastServer: "h:2/b"}})
	if want := []string{"h:1/a", "h:2/b"}; !slices.Equal(got, want) {
		t.Fatalf("lastServers = %v, want %v", got, want)
	}
}

// lockServer makes server's key under servers/, held by a new session.
func lockServer(t *testing.T, c *coord.Local, server string) coord.Session {
	t.Helper()
	ctx := context.Background()
	sess, err := c.NewSession(ctx, coord.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sess.TryLock(ctx, coord.ServerKey(server), []byte(meta.ServerAddr(server))); err != nil {
		t.Fatal(err)
	}
	return sess
}

func TestServerNames(t *testing.T) {
	ctx := context.Background()
	c := coord.NewLocal(coord.LocalConfig{})
	defer c.Close()
	lockServer(t, c, "h:1/held")
	released := lockServer(t, c, "h:2/released")
	if err := released.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	if e, err := c.Get(ctx, coord.ServerKey("h:2/released")); err != nil || e.Session != "" {
		t.Fatalf("released key: %+v, %v; want the key without a session", e, err)
	}
	got, err := serverNames(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"h:1/held", "h:2/released"}; !slices.Equal(got, want) {
		t.Fatalf("serverNames = %v, want %v (released keys count)", got, want)
	}
	if err := c.Put(ctx, coord.PrefixServers+"%zz", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := serverNames(ctx, c); err == nil {
		t.Fatal("serverNames with an unreadable key: no error")
	}
}

// logFixture is a cluster's store and lock service with commit logs.
type logFixture struct {
	store blob.Store
	coord *coord.Local
	gc    *logGC
	clock time.Time
}

func newLogFixture(t *testing.T) *logFixture {
	f := &logFixture{store: newLocalStore(t), coord: coord.NewLocal(coord.LocalConfig{}), clock: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	t.Cleanup(func() { f.coord.Close() })
	f.gc = newLogGC(f.store, f.coord, 15*time.Minute)
	f.gc.now = func() time.Time { return f.clock }
	return f
}

// writeLog adds a log object to server's log.
func (f *logFixture) writeLog(t *testing.T, server string, n int) {
	put(t, f.store, fmt.Sprintf("%s/%020d/%020d.log", LogPrefix(server), 1, n))
}

func (f *logFixture) collect(t *testing.T, last ...string) []string {
	t.Helper()
	deleted, err := f.gc.collect(context.Background(), func(context.Context) ([]string, error) { return last, nil })
	if err != nil {
		t.Fatal(err)
	}
	return deleted
}

func TestLogGCCollect(t *testing.T) {
	f := newLogFixture(t)
	ctx := context.Background()
	const (
		live     = "h:1/live"
		released = "h:2/released"
		recov    = "h:3/recovering" // dead, still a tablet's last server
		dead     = "h:4/dead"
		deadToo  = "h:4/dead2" // its logName extends dead's
		writing  = "h:5/zombie"
	)
	lockServer(t, f.coord, live)
	if err := lockServer(t, f.coord, released).Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{live, released, recov, dead, deadToo, writing} {
		f.writeLog(t, s, 0)
	}
	put(t, f.store, SortedLogPrefix(dead)+"/sorted-0", SortedLogPrefix(recov)+"/sorted-0", LogsPrefix+"stray")

	// First sight: every log may have just been written.
	if d := f.collect(t, recov); len(d) > 0 {
		t.Fatalf("first round deleted %v", d)
	}
	f.clock = f.clock.Add(10 * time.Minute)
	f.writeLog(t, writing, 1) // a late write: its log is young again
	if d := f.collect(t, recov); len(d) > 0 {
		t.Fatalf("round within the grace deleted %v", d)
	}
	f.clock = f.clock.Add(5 * time.Minute)
	if got, want := f.collect(t, recov), []string{logName(dead), logName(deadToo)}; !slices.Equal(got, want) {
		t.Fatalf("round after the grace deleted %v, want %v", got, want)
	}
	for _, p := range []string{LogPrefix(dead) + "/", SortedLogPrefix(dead) + "/", LogPrefix(deadToo) + "/"} {
		if n := listNames(t, f.store, p); len(n) > 0 {
			t.Errorf("left under %s: %v", p, n)
		}
	}
	for _, p := range []string{LogPrefix(live) + "/", LogPrefix(released) + "/", LogPrefix(recov) + "/", SortedLogPrefix(recov) + "/", LogPrefix(writing) + "/"} {
		if n := listNames(t, f.store, p); len(n) == 0 {
			t.Errorf("%s was deleted", p)
		}
	}
	if n := listNames(t, f.store, LogsPrefix+"stray"); len(n) != 1 {
		t.Error("an object belonging to no log was deleted")
	}

	f.clock = f.clock.Add(10 * time.Minute)
	// The recovered tablets' new location is recorded: the log goes, and
	// the zombie's last write is now old too.
	if got, want := f.collect(t), []string{logName(recov), logName(writing)}; !slices.Equal(got, want) {
		t.Fatalf("deleted %v, want %v", got, want)
	}
	if n := listNames(t, f.store, SortedLogPrefix(recov)+"/"); len(n) > 0 {
		t.Errorf("sorted copy left: %v", n)
	}
	// Forgotten once gone.
	if len(f.gc.seen) != 2 {
		t.Errorf("collector remembers %d logs, want 2 (live and released)", len(f.gc.seen))
	}
}

// orderKV and orderStore record the collector's reads.
type orderKV struct {
	coord.KV
	calls *[]string
	err   error
}

func (k orderKV) List(ctx context.Context, prefix string) ([]coord.Entry, error) {
	*k.calls = append(*k.calls, "coord "+prefix)
	if k.err != nil {
		return nil, k.err
	}
	return k.KV.List(ctx, prefix)
}

type orderStore struct {
	blob.Store
	calls *[]string
	err   error
}

func (s orderStore) List(ctx context.Context, prefix string) ([]blob.Attrs, error) {
	*s.calls = append(*s.calls, "blob "+prefix)
	if s.err != nil {
		return nil, s.err
	}
	return s.Store.List(ctx, prefix)
}

func TestLogGCReadsLogsThenServersThenMetadata(t *testing.T) {
	f := newLogFixture(t)
	var calls []string
	f.gc.store = orderStore{Store: f.store, calls: &calls}
	f.gc.kv = orderKV{KV: f.coord, calls: &calls}
	if _, err := f.gc.collect(context.Background(), func(context.Context) ([]string, error) {
		calls = append(calls, "metadata")
		return nil, nil
	}); err != nil {
		t.Fatal(err)
	}
	want := []string{"blob " + LogsPrefix, "blob " + SortedLogsPrefix, "coord " + coord.PrefixServers, "metadata"}
	if !slices.Equal(calls, want) {
		t.Fatalf("reads %q, want %q", calls, want)
	}
}

// TestLogGCStartingServer: a server that starts during a round, just
// after servers/ was listed, locks its key before writing its log, so the
// round, having listed the logs first, cannot have seen its log.
func TestLogGCStartingServer(t *testing.T) {
	f := newLogFixture(t)
	f.gc.grace = 0 // only the order protects it
	const s = "h:1/new"
	f.gc.kv = &startingKV{KV: f.coord, start: func() {
		lockServer(t, f.coord, s)
		f.writeLog(t, s, 0)
	}}
	if d := f.collect(t); len(d) > 0 {
		t.Fatalf("deleted %v", d)
	}
	if d := f.collect(t); len(d) > 0 {
		t.Fatalf("second round deleted %v", d)
	}
	if n := listNames(t, f.store, LogPrefix(s)+"/"); len(n) != 1 {
		t.Fatalf("log of the new server: %v", n)
	}
}

// startingKV runs start once, just after servers/ is first listed.
type startingKV struct {
	coord.KV
	start func()
}

func (k *startingKV) List(ctx context.Context, prefix string) ([]coord.Entry, error) {
	ents, err := k.KV.List(ctx, prefix)
	if k.start != nil && prefix == coord.PrefixServers {
		k.start()
		k.start = nil
	}
	return ents, err
}

func TestLogGCAbortsOnError(t *testing.T) {
	boom := errors.New("boom")
	for _, tc := range []struct {
		name  string
		setup func(f *logFixture) func(context.Context) ([]string, error)
	}{
		{"listing logs", func(f *logFixture) func(context.Context) ([]string, error) {
			var calls []string
			f.gc.store = orderStore{Store: f.store, calls: &calls, err: boom}
			return nil
		}},
		{"listing servers", func(f *logFixture) func(context.Context) ([]string, error) {
			var calls []string
			f.gc.kv = orderKV{KV: f.coord, calls: &calls, err: boom}
			return nil
		}},
		{"reading METADATA", func(f *logFixture) func(context.Context) ([]string, error) {
			return func(context.Context) ([]string, error) { return nil, boom }
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newLogFixture(t)
			f.gc.grace = 0
			const dead = "h:1/dead"
			f.writeLog(t, dead, 0)
			last := tc.setup(f)
			if last == nil {
				last = func(context.Context) ([]string, error) { return nil, nil }
			}
			deleted, err := f.gc.collect(context.Background(), last)
			if !errors.Is(err, boom) || len(deleted) > 0 {
				t.Fatalf("collect = %v, %v; want nothing deleted and the error", deleted, err)
			}
			if n := listNames(t, f.store, LogPrefix(dead)+"/"); len(n) != 1 {
				t.Fatalf("log deleted despite the error: %v", n)
			}
		})
	}
}

// failingDelete fails to delete the objects whose names contain bad.
type failingDelete struct {
	blob.Store
	bad string
}

func (s failingDelete) Delete(ctx context.Context, name string) error {
	if strings.Contains(name, s.bad) {
		return errors.New("delete refused")
	}
	return s.Store.Delete(ctx, name)
}

func TestLogGCDeleteFailure(t *testing.T) {
	f := newLogFixture(t)
	f.gc.grace = 0
	f.writeLog(t, "h:1/a", 0)
	f.writeLog(t, "h:2/b", 0)
	f.gc.store = failingDelete{Store: f.store, bad: "h:1_a"}
	deleted, err := f.gc.collect(context.Background(), func(context.Context) ([]string, error) { return nil, nil })
	if err == nil || !strings.Contains(err.Error(), "h:1_a") {
		t.Fatalf("err = %v, want the failed log named", err)
	}
	if want := []string{"h:2_b"}; !slices.Equal(deleted, want) {
		t.Fatalf("deleted %v, want %v", deleted, want)
	}
}
