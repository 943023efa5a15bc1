package assign

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// userTablets returns n tablets of table "t" covering all rows, IDs u000…,
// each of the given size.
func userTablets(n int, size int64) []Tablet {
	var ts []Tablet
	for i := 0; i < n; i++ {
		t := Tablet{ID: TabletID(fmt.Sprintf("u%03d", i)), Table: "t", Size: size}
		if i > 0 {
			t.Start = fmt.Sprintf("k%03d", i)
		}
		if i < n-1 {
			t.End = fmt.Sprintf("k%03d", i+1)
		}
		ts = append(ts, t)
	}
	return ts
}

func metaTablets(nMeta int) []Tablet {
	ts := []Tablet{{ID: "root", Table: "METADATA", End: "m0", Kind: Root, Size: 1}}
	for i := 0; i < nMeta; i++ {
		t := Tablet{ID: TabletID(fmt.Sprintf("meta%d", i)), Table: "METADATA", Start: fmt.Sprintf("m%d", i), Kind: Meta, Size: 1}
		if i < nMeta-1 {
			t.End = fmt.Sprintf("m%d", i+1)
		}
		ts = append(ts, t)
	}
	return ts
}

func servers(ids ...ServerID) []Server {
	var ss []Server
	for _, id := range ids {
		ss = append(ss, Server{ID: id, Addr: string(id) + ":1"})
	}
	return ss
}

// place puts tablets on servers round-robin and records METADATA's
// location.
func place(st *State, ids ...TabletID) {
	i := 0
	for ti := range st.Tablets {
		t := &st.Tablets[ti]
		if len(ids) > 0 && !slices.Contains(ids, t.ID) {
			continue
		}
		s := &st.Live[i%len(st.Live)]
		s.Serving = append(s.Serving, Served{ID: t.ID, Table: t.Table, Start: t.Start, End: t.End})
		t.LastServer = s.ID
		i++
	}
}

// recorded sets each tablet's LastServer, where it has none, to a server
// serving it: the location its load wrote to METADATA.
func recorded(st *State) {
	for ti := range st.Tablets {
		t := &st.Tablets[ti]
		for _, s := range st.Live {
			if t.LastServer == "" && slices.ContainsFunc(s.Serving, func(x Served) bool { return x.ID == t.ID }) {
				t.LastServer = s.ID
			}
		}
	}
}

func kinds(acts []Action) map[ActionKind]int {
	m := make(map[ActionKind]int)
	for _, a := range acts {
		m[a.Kind]++
	}
	return m
}

func only(acts []Action, k ActionKind) []Action {
	var out []Action
	for _, a := range acts {
		if a.Kind == k {
			out = append(out, a)
		}
	}
	return out
}

func describe(acts []Action) string {
	var b strings.Builder
	for _, a := range acts {
		b.WriteString("\n  " + a.String())
	}
	return b.String()
}

var noMerge = Config{NoMerge: true}

func TestStartupOrder(t *testing.T) {
	st := State{Live: servers("s1", "s2", "s3"), Tablets: append(metaTablets(2), userTablets(12, 100)...)}
	// Round 1: only the root.
	acts := Plan(st, noMerge)
	if len(acts) != 1 || acts[0].Kind != Assign || acts[0].Tablet != "root" {
		t.Fatalf("round 1: want only the root assigned, got %s", describe(acts))
	}
	// Loading, not confirmed: nothing new.
	st.InFlight = []InFlight{{Kind: LoadRequest, Tablet: "root", Server: acts[0].Server}}
	if acts := Plan(st, noMerge); len(acts) != 0 {
		t.Fatalf("root in flight: want nothing, got %s", describe(acts))
	}
	// Root served: the METADATA tablets, nothing else.
	st.InFlight = nil
	place(&st, "root")
	acts = Plan(st, noMerge)
	if got := only(acts, Assign); len(got) != 2 || len(acts) != 2 || got[0].Tablet != "meta0" || got[1].Tablet != "meta1" {
		t.Fatalf("round 2: want meta0, meta1, got %s", describe(acts))
	}
	// METADATA served: every user tablet, spread evenly.
	st.Live[1].Serving = append(st.Live[1].Serving, Served{ID: "meta0"})
	st.Live[2].Serving = append(st.Live[2].Serving, Served{ID: "meta1"})
	recorded(&st)
	acts = Plan(st, noMerge)
	if len(acts) != 12 || kinds(acts)[Assign] != 12 {
		t.Fatalf("round 3: want 12 assigns, got %s", describe(acts))
	}
	per := map[ServerID]int{"s1": 1, "s2": 1, "s3": 1}
	for i, a := range acts {
		if want := TabletID(fmt.Sprintf("u%03d", i)); a.Tablet != want {
			t.Errorf("assign %d is %s, want %s (table order)", i, a.Tablet, want)
		}
		per[a.Server]++
	}
	for s, n := range per {
		if n != 5 {
			t.Errorf("server %s gets %d tablets in all, want 5: %v", s, n, per)
		}
	}
}

func TestServerDeathReassignsExactlyItsTablets(t *testing.T) {
	st := State{Live: servers("s1", "s2", "s3"), Tablets: append(metaTablets(1), userTablets(10, 100)...)}
	place(&st)
	// s3 dies: the master took its lock. (s1 and s2 hold the root and
	// METADATA; user tablets would wait for those.)
	var lost []TabletID
	for _, sv := range st.Live[2].Serving {
		lost = append(lost, sv.ID)
	}
	st.Live = st.Live[:2]
	st.Dead = []DeadServer{{ID: "s3"}}
	acts := Plan(st, Config{NoMerge: true, SortLogMin: 100})
	var got []TabletID
	for _, a := range acts {
		if a.Kind != Assign {
			t.Fatalf("unexpected action %s", a)
		}
		if a.RecoverFrom != "s3" || a.SortedLog || a.Reason != "dead" {
			t.Errorf("%s: want recovery from s3's unsorted log", a)
		}
		if a.Server == "s3" {
			t.Errorf("%s: assigned to the dead server", a)
		}
		got = append(got, a.Tablet)
	}
	slices.Sort(lost)
	slices.Sort(got)
	if !slices.Equal(got, lost) {
		t.Fatalf("reassigned %v, want exactly s3's %v", got, lost)
	}
}

func TestDeadServerLogSortedOnce(t *testing.T) {
	base := State{Live: servers("s1", "s2"), Tablets: append(metaTablets(1), userTablets(10, 100)...)}
	place(&base, "root", "meta0")
	for i := range base.Tablets {
		if base.Tablets[i].Kind == User {
			base.Tablets[i].LastServer = "dead1"
		}
	}
	cfg := Config{NoMerge: true, SortLogMin: 5}
	for _, tc := range []struct {
		log         LogState
		wantSort    bool
		wantAssigns int
		sorted      bool
	}{
		{LogUnsorted, true, 0, false},
		{LogSorting, false, 0, false},
		{LogSorted, false, 10, true},
		{LogSortFailed, false, 10, false},
	} {
		st := base
		st.Dead = []DeadServer{{ID: "dead1", Log: tc.log}}
		checkRecoveryPlan(t, fmt.Sprintf("log %d", tc.log), Plan(st, cfg), tc.wantSort, tc.wantAssigns, tc.sorted)
	}
	// Fewer tablets than SortLogMin: no sort, straight recovery.
	st := base
	st.Dead = []DeadServer{{ID: "dead1"}}
	if acts := Plan(st, Config{NoMerge: true, SortLogMin: 11}); kinds(acts)[SortLog] != 0 || kinds(acts)[Assign] != 10 {
		t.Errorf("below SortLogMin: got %s", describe(acts))
	}
	// The root never waits for a sort.
	st = State{Live: servers("s1"), Dead: []DeadServer{{ID: "dead1"}}, Tablets: append(metaTablets(1), userTablets(10, 100)...)}
	for i := range st.Tablets {
		st.Tablets[i].LastServer = "dead1"
	}
	acts := Plan(st, Config{NoMerge: true, SortLogMin: 5})
	if len(acts) != 2 || acts[0].Kind != SortLog || acts[1].Tablet != "root" || acts[1].RecoverFrom != "dead1" {
		t.Errorf("root on a dead server: got %s", describe(acts))
	}
}

// A dead server that held a METADATA tablet: the rows of its user tablets
// are not readable (METADATA shows only the METADATA tablet), yet it held
// many (DeadServer.Held, the master's record), so its log sort starts at
// once, alongside the METADATA tablet's load, rather than after it.
func TestDeadServerLogSortNotBehindMetadata(t *testing.T) {
	st := State{Live: servers("s1", "s2"), Tablets: metaTablets(1)}
	place(&st, "root")
	st.Tablets[1].LastServer = "dead1" // meta0; its user rows unreadable
	cfg := Config{NoMerge: true, SortLogMin: 5}
	for _, tc := range []struct {
		held     int
		wantSort bool
	}{{10, true}, {4, false}, {0, false}} {
		st.Dead = []DeadServer{{ID: "dead1", Held: tc.held}}
		acts := Plan(st, cfg)
		k := kinds(acts)
		if (k[SortLog] == 1) != tc.wantSort || k[Assign] != 1 || len(acts) != k[SortLog]+k[Assign] {
			t.Fatalf("held %d: got %s", tc.held, describe(acts))
		}
		a := only(acts, Assign)[0]
		if a.Tablet != "meta0" || a.RecoverFrom != "dead1" || a.SortedLog {
			t.Errorf("held %d: %s; want meta0 recovered from dead1's unsorted log at once", tc.held, a)
		}
	}
}

// Two METADATA tablets or more of a dead server have its log sorted, and
// wait for the sort (each would replay the whole unsorted log, which the
// sort reads once), but not longer than MetaSortWait; one alone does not
// wait (TestDeadServerLogSortNotBehindMetadata).
func TestDeadServerMetadataWaitsForTheSort(t *testing.T) {
	st := State{Live: servers("s1", "s2"), Tablets: metaTablets(3)}
	place(&st, "root")
	for i := range st.Tablets {
		if st.Tablets[i].Kind == Meta {
			st.Tablets[i].LastServer = "dead1"
		}
	}
	cfg := Config{NoMerge: true, SortLogMin: 5, MetaSortWait: 5 * time.Second}
	for _, tc := range []struct {
		name       string
		dead       DeadServer
		wantSort   bool
		wantAssign int
		sorted     bool
	}{
		{"sort not started", DeadServer{ID: "dead1", Held: 10}, true, 0, false},
		{"sorting for 2s", DeadServer{ID: "dead1", Held: 10, Log: LogSorting, SortingFor: 2 * time.Second}, false, 0, false},
		{"sorting past MetaSortWait", DeadServer{ID: "dead1", Held: 10, Log: LogSorting, SortingFor: 5 * time.Second}, false, 3, false},
		{"sorted", DeadServer{ID: "dead1", Held: 10, Log: LogSorted}, false, 3, true},
		{"sort failed", DeadServer{ID: "dead1", Held: 10, Log: LogSortFailed}, false, 3, false},
		// Held unknown (a new master): the METADATA tablets alone ask
		// for the sort.
		{"held unknown", DeadServer{ID: "dead1"}, true, 0, false},
	} {
		st.Dead = []DeadServer{tc.dead}
		checkRecoveryPlan(t, tc.name, Plan(st, cfg), tc.wantSort, tc.wantAssign, tc.sorted)
	}
}

// checkRecoveryPlan checks that acts are a SortLog of dead1 (if wantSort)
// and wantAssign loads recovering from dead1's log, sorted or not.
func checkRecoveryPlan(t *testing.T, what string, acts []Action, wantSort bool, wantAssign int, sorted bool) {
	t.Helper()
	k := kinds(acts)
	if (k[SortLog] == 1) != wantSort || k[Assign] != wantAssign || len(acts) != k[SortLog]+k[Assign] {
		t.Errorf("%s: got %s", what, describe(acts))
	}
	for _, a := range only(acts, Assign) {
		if a.SortedLog != sorted || a.RecoverFrom != "dead1" {
			t.Errorf("%s: %s", what, a)
		}
	}
}

func TestInFlight(t *testing.T) {
	cfg := Config{NoMerge: true, LoadTimeout: 10 * time.Second}
	mk := func() State {
		st := State{Live: servers("s1", "s2"), Tablets: append(metaTablets(0), userTablets(2, 100)...)}
		st.Tablets[0].Size = 100 // the root weighs as much as a user tablet
		place(&st, "root", "u000")
		return st
	}
	for _, tc := range []struct {
		name string
		req  InFlight
		dead bool
		want string // describe() of the actions
	}{
		{"young load", InFlight{Kind: LoadRequest, Tablet: "u001", Server: "s2", Age: 9 * time.Second}, false, ""},
		{"old load resent to same server", InFlight{Kind: LoadRequest, Tablet: "u001", Server: "s2", Age: 10 * time.Second}, false,
			"\n  assign u001 to s2 (timeout)"},
		{"failed load before its retry", InFlight{Kind: LoadRequest, Tablet: "u001", Server: "s2", Age: 1900 * time.Millisecond, Retry: 2 * time.Second}, false, ""},
		{"failed load resent after its retry", InFlight{Kind: LoadRequest, Tablet: "u001", Server: "s2", Age: 2 * time.Second, Retry: 2 * time.Second}, false,
			"\n  assign u001 to s2 (failed)"},
		{"retry longer than the timeout", InFlight{Kind: LoadRequest, Tablet: "u001", Server: "s2", Age: 10 * time.Second, Retry: time.Minute}, false,
			"\n  assign u001 to s2 (timeout)"},
		// s1 holds the root, s2 u000, both 100 bytes.
		{"load to dead server is void", InFlight{Kind: LoadRequest, Tablet: "u001", Server: "s9", Age: time.Second}, true,
			"\n  assign u001 to s1 (unassigned)"},
		{"confirmed load", InFlight{Kind: LoadRequest, Tablet: "u000", Server: "s2", Age: time.Hour}, false, "\n  assign u001 to s1 (unassigned)"},
		// u000 is leaving s2: s2 is the emptier.
		{"young unload", InFlight{Kind: UnloadRequest, Tablet: "u000", Server: "s2", Age: time.Second}, false, "\n  assign u001 to s2 (unassigned)"},
		{"old unload resent", InFlight{Kind: UnloadRequest, Tablet: "u000", Server: "s2", Age: time.Minute}, false,
			"\n  unassign u000 from s2 to  (timeout)\n  assign u001 to s2 (unassigned)"},
		{"failed unload before its retry", InFlight{Kind: UnloadRequest, Tablet: "u000", Server: "s2", Age: 900 * time.Millisecond, Retry: time.Second}, false,
			"\n  assign u001 to s2 (unassigned)"},
		{"failed unload resent after its retry", InFlight{Kind: UnloadRequest, Tablet: "u000", Server: "s2", Age: time.Second, Retry: time.Second}, false,
			"\n  unassign u000 from s2 to  (failed)\n  assign u001 to s2 (unassigned)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := mk()
			st.InFlight = []InFlight{tc.req}
			if tc.dead {
				st.Dead = []DeadServer{{ID: "s9"}}
			}
			if got := describe(Plan(st, cfg)); got != tc.want {
				t.Errorf("got %s\nwant %s", got, tc.want)
			}
		})
	}
}

func TestDuplicateServingResolved(t *testing.T) {
	st := State{Live: servers("s1", "s2", "s3"), Tablets: append(metaTablets(0), userTablets(3, 100)...)}
	place(&st)
	// s3 also reports u000, whose METADATA location is s2.
	st.Live[2].Serving = append(st.Live[2].Serving, Served{ID: "u000"})
	acts := Plan(st, noMerge)
	if got := describe(acts); got != "\n  unassign u000 from s3 to  (duplicate)" {
		t.Fatalf("got %s", got)
	}
}

// TestOrphansUnloaded: each orphan (State.Orphans) is unloaded from its
// server if that server is live, after the rescan its unknown range asks
// for; an orphan of a server not live is left alone.
func TestOrphansUnloaded(t *testing.T) {
	st := State{Live: servers("s1", "s2"), Tablets: append(metaTablets(0), userTablets(3, 100)...)}
	place(&st)
	st.Live[1].Serving = append(st.Live[1].Serving, Served{ID: "gone", Table: "deleted", Start: "a", End: "b"})
	st.Orphans = []Orphan{{Server: "s2", Tablet: "gone"}, {Server: "s9", Tablet: "elsewhere"}}
	want := `
  rescan deleted ["a", "b") (unknown)
  unassign gone from s2 to  (orphan)`
	if got := describe(Plan(st, noMerge)); got != want {
		t.Fatalf("got %s\nwant %s", got, want)
	}
}

func TestLostSplitNotification(t *testing.T) {
	// METADATA as the master read it has u001 [k001, k002) on s2; s2 split
	// it into c1 [k001, k0015) and c2 [k0015, k002), committed the split to
	// METADATA, and the notification was lost.
	st := State{Live: servers("s1", "s2"), Tablets: append(metaTablets(0), userTablets(3, 100)...)}
	place(&st)
	s2 := &st.Live[1]
	st.Tablets[2].LastServer = "s2" // u001
	st.Live[0].Serving = slices.DeleteFunc(st.Live[0].Serving, func(s Served) bool { return s.ID == "u001" })
	s2.Serving = append(s2.Serving, Served{ID: "c1", Table: "t", Start: "k001", End: "k0015"}, Served{ID: "c2", Table: "t", Start: "k0015", End: "k002"})
	acts := Plan(st, noMerge)
	if got := describe(acts[:1]); got != `
  rescan t ["k001", "k002") (split)` || slices.ContainsFunc(acts, func(a Action) bool { return a.Tablet == "u001" }) {
		t.Fatalf("got %s", describe(acts))
	}
	// The same with the children unknown and the parent's server dead, the
	// master learning of the split from a report: the parent is held.
	st.Live = st.Live[:1]
	st.Dead = []DeadServer{{ID: "s2"}}
	st.Splits = []Split{{Server: "s2", Table: "t", Parent: "u001", Children: []TabletID{"c1", "c2"}}}
	acts = Plan(st, noMerge)
	if got := describe(acts[:1]); got != `
  rescan t ["k001", "k002") (split)` || len(acts) != 3 || slices.ContainsFunc(acts, func(a Action) bool { return a.Tablet == "u001" }) {
		t.Fatalf("with report: got %s", describe(acts))
	}
	// A report whose parent the master no longer has but whose child it
	// lacks: rescan the table.
	st.Tablets = slices.DeleteFunc(slices.Clone(st.Tablets), func(t Tablet) bool { return t.ID == "u001" })
	st.Tablets = append(st.Tablets, Tablet{ID: "c1", Table: "t", Start: "k001", End: "k0015", LastServer: "s2"})
	acts = Plan(st, noMerge)
	if k := kinds(acts); k[Rescan] != 1 || k[Assign] != 3 || acts[0].Table != "t" || acts[0].Start != "" || acts[0].End != "" {
		t.Fatalf("child missing: got %s", describe(acts))
	}
	// A served tablet no known one overlaps: rescan its own range.
	st = State{Live: servers("s1"), Tablets: metaTablets(0)}
	place(&st)
	st.Live[0].Serving = append(st.Live[0].Serving, Served{ID: "x", Table: "new", Start: "a", End: "b"})
	if got := describe(Plan(st, noMerge)); got != `
  rescan new ["a", "b") (unknown)` {
		t.Fatalf("unknown table: got %s", got)
	}
}

func TestDrain(t *testing.T) {
	st := State{Live: servers("s1", "s2", "s3"), Tablets: append(metaTablets(0), userTablets(8, 100)...)}
	place(&st)
	st.Live[0].Draining = true
	st.Live[0].Serving[1].Splitting = true // u002
	acts := Plan(st, Config{NoMerge: true, MaxMoves: 2})
	if got := describe(acts); got != `
  unassign root from s1 to s2 (drain)
  unassign u005 from s1 to s3 (drain)` {
		t.Fatalf("got %s", got)
	}
	// An unload in flight counts against the budget.
	st.InFlight = []InFlight{{Kind: UnloadRequest, Tablet: "root", Server: "s1", Age: time.Second}}
	if got := describe(Plan(st, Config{NoMerge: true, MaxMoves: 2})); got != `
  unassign u005 from s1 to s2 (drain)` {
		t.Fatalf("with one in flight: got %s", got)
	}
	// Unloaded tablets go to active servers only.
	st.InFlight = nil
	st.Live[0].Serving = nil
	for _, a := range Plan(st, noMerge) {
		if a.Kind != Assign || a.Server == "s1" {
			t.Errorf("after drain: %s", a)
		}
	}
}

func TestNewServerGetsTablets(t *testing.T) {
	st := State{Live: servers("s1", "s2", "s3"), Tablets: append(metaTablets(0), userTablets(29, 100)...)}
	place(&st)
	st.Live = append(st.Live, servers("s4")...)
	acts := Plan(st, Config{NoMerge: true, MaxMoves: 3})
	if len(acts) != 3 {
		t.Fatalf("want 3 moves (MaxMoves), got %s", describe(acts))
	}
	for _, a := range acts {
		if a.Kind != Unassign || a.To != "s4" || a.Reason != "balance" {
			t.Errorf("%s", a)
		}
	}
}

func TestBalancedIsStable(t *testing.T) {
	st := State{Live: servers("s1", "s2", "s3"), Tablets: append(metaTablets(2), userTablets(30, 100<<20)...)}
	place(&st)
	if acts := Plan(st, Config{}); len(acts) != 0 {
		t.Fatalf("balanced state: got %s", describe(acts))
	}
}

func TestBalancePrefersNotSplitting(t *testing.T) {
	st := State{Live: servers("s1", "s2"), Tablets: userTablets(6, 100)}
	st.Live[0].Serving = []Served{{ID: "u000", Splitting: true}, {ID: "u001", Splitting: true}, {ID: "u002", Splitting: true}, {ID: "u003"}, {ID: "u004"}}
	st.Live[1].Serving = []Served{{ID: "u005"}}
	recorded(&st)
	acts := Plan(st, noMerge)
	if got := describe(acts); got != `
  unassign u003 from s1 to s2 (balance)
  unassign u004 from s1 to s2 (balance)` {
		t.Fatalf("got %s", got)
	}
	// With only splitting tablets left to move, they move.
	st.Live[0].Serving = []Served{{ID: "u000", Splitting: true}, {ID: "u001", Splitting: true}, {ID: "u002", Splitting: true}, {ID: "u003", Splitting: true}, {ID: "u004", Splitting: true}}
	if k := kinds(Plan(st, noMerge)); k[Unassign] != 2 {
		t.Fatalf("only splitting: got %v", k)
	}
}

func TestMerge(t *testing.T) {
	mb := int64(1 << 20)
	cfg := Config{SplitSize: 100 * mb, MergeBelow: 25 * mb, MaxMerges: 2}
	mk := func(sizes ...int64) State {
		st := State{Live: servers("s1"), Tablets: append(metaTablets(0), userTablets(len(sizes), 0)...)}
		for i, s := range sizes {
			st.Tablets[i+1].Size = s * mb
		}
		place(&st)
		return st
	}
	for _, tc := range []struct {
		name   string
		sizes  []int64
		merges []MergeUnderway
		want   string
	}{
		{"two small", []int64{1, 2}, nil, "\n  merge t/u000+u001"},
		{"one big", []int64{1, 30}, nil, ""},
		{"pairs left to right", []int64{1, 1, 1, 30, 1, 1}, nil, "\n  merge t/u000+u001\n  merge t/u004+u005"},
		{"budget", []int64{1, 1, 1, 1, 1, 1}, []MergeUnderway{{"t", "u000", "u001"}}, "\n  merge t/u002+u003"},
		{"underway not merged again", []int64{1, 1, 1}, []MergeUnderway{{"t", "u001", "u002"}}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := mk(tc.sizes...)
			st.Merges = tc.merges
			if got := describe(Plan(st, cfg)); got != tc.want {
				t.Errorf("got %s\nwant %s", got, tc.want)
			}
		})
	}
	// Tablets of different tables, or unserved, never merge.
	st := State{Live: servers("s1"), Tablets: []Tablet{
		{ID: "a", Table: "t1", End: "k", Size: 1}, {ID: "b", Table: "t2", Start: "k", Size: 1},
		{ID: "c", Table: "t3", End: "k", Size: 1}, {ID: "d", Table: "t3", Start: "k", Size: 1},
	}}
	st.Live[0].Serving = []Served{{ID: "a"}, {ID: "b"}, {ID: "c"}}
	recorded(&st)
	if got := describe(Plan(st, Config{MaxMoves: 1})); got != "\n  assign d to s1 (unassigned)" {
		t.Errorf("got %s", got)
	}
	// Merging tablets are not reassigned while the merge runs.
	st.Merges = []MergeUnderway{{"t3", "c", "d"}}
	if got := describe(Plan(st, Config{})); got != "" {
		t.Errorf("merging: got %s", got)
	}
}

func TestDeadIDReportedLiveIsIgnored(t *testing.T) {
	st := State{Live: servers("s1", "s2"), Tablets: append(metaTablets(0), userTablets(2, 1)...)}
	place(&st)
	st.Dead = []DeadServer{{ID: "s2"}}
	for _, a := range Plan(st, noMerge) {
		if a.Server == "s2" {
			t.Errorf("%s: to a dead server", a)
		}
	}
}

func TestPlanIsDeterministic(t *testing.T) {
	st := State{Live: servers("s3", "s1", "s2"), Tablets: append(userTablets(20, 7), metaTablets(2)...)}
	place(&st, "root", "meta0", "meta1")
	want := describe(Plan(st, Config{}))
	for i := 0; i < 20; i++ {
		st2 := st
		st2.Live = slices.Clone(st.Live)
		st2.Tablets = slices.Clone(st.Tablets)
		// Reverse the input order: the result must not change.
		slices.Reverse(st2.Live)
		slices.Reverse(st2.Tablets)
		if got := describe(Plan(st2, Config{})); got != want {
			t.Fatalf("run %d differs:\n%s\nvs\n%s", i, got, want)
		}
	}
}

// TestRecordServedTabletMetadataDoesNotName: a tablet a live server serves
// while METADATA names another server (a load whose location write was
// dropped when its master lost the lock, or failed) gets its location
// recorded — clients find it through METADATA — and nothing else; not
// when METADATA names one of the servers serving it, nor when it already
// names the server.
func TestRecordServedTabletMetadataDoesNotName(t *testing.T) {
	st := State{Live: servers("s1", "s2"), Tablets: userTablets(2, 100)}
	st.Tablets[0].LastServer = "s1" // moved to s2; the write of s2 was lost
	st.Tablets[1].LastServer = "s2"
	st.Live[0].Serving = nil
	st.Live[1].Serving = []Served{{ID: "u000"}, {ID: "u001"}}
	// (s1 serves nothing: u001, settled, moves there for balance.)
	if got := describe(Plan(st, noMerge)); got != `
  record u000 at s2 (unrecorded)
  unassign u001 from s2 to s1 (balance)` {
		t.Fatalf("got %s", got)
	}
	// Served by both, METADATA naming s1: s1 keeps it, s2 unloads it.
	st.Live[0].Serving = []Served{{ID: "u000"}}
	if got := describe(Plan(st, noMerge)); got != `
  unassign u000 from s2 to  (duplicate)` {
		t.Fatalf("served twice: got %s", got)
	}
	st.Live[0].Serving = nil
	st.Tablets[0].LastServer = "s2"
	for _, a := range Plan(st, noMerge) {
		if a.Kind == Record {
			t.Fatalf("recorded a location METADATA already holds: %s", a)
		}
	}
	// A first load whose location write was lost: METADATA names no
	// server. Left alone, clients would be told "not assigned" forever
	// while s2 serves it.
	st.Tablets[0].LastServer = ""
	got := Plan(st, noMerge)
	var rec []Action
	for _, a := range got {
		if a.Kind == Record {
			rec = append(rec, a)
		}
	}
	if len(rec) != 1 || rec[0].Tablet != "u000" || rec[0].Server != "s2" {
		t.Fatalf("first load's lost location: got %s, want u000 recorded at s2", describe(got))
	}
}
