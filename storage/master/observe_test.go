package master

import (
	"context"
	"errors"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tabuladb/tabula/storage/coord"
	"github.com/tabuladb/tabula/storage/master/assign"
)

// held and released are servers/ entries: a key held by a session, and
// one whose session ended.
func held(addr string) coord.Entry     { return coord.Entry{Value: []byte(addr), Session: "s-" + addr} }
func released(addr string) coord.Entry { return coord.Entry{Value: []byte(addr)} }

func served(ids ...assign.TabletID) []assign.Served {
	out := make([]assign.Served, len(ids))
	for i, id := range ids {
		out[i] = assign.Served{ID: id}
	}
	return out
}

// liveView is a compact picture of a State's Live servers for comparing:
// server → tablets served, with "(draining)" for released servers.
func liveView(st assign.State) map[assign.ServerID][]assign.TabletID {
	out := make(map[assign.ServerID][]assign.TabletID)
	for _, s := range st.Live {
		ids := []assign.TabletID{}
		for _, sv := range s.Serving {
			ids = append(ids, sv.ID)
		}
		if s.Draining {
			ids = append(ids, "(draining)")
		}
		out[s.ID] = ids
	}
	return out
}

func TestBuildState(t *testing.T) {
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	down := errors.New("connection refused")
	tablets := []assign.Tablet{
		{ID: "t1", Table: "t", End: "m", LastServer: "a"},
		{ID: "t2", Table: "t", Start: "m", LastServer: "b"},
		{ID: "t3", Table: "u", LastServer: "dead1"},
	}
	type want struct {
		live        map[assign.ServerID][]assign.TabletID
		released    []assign.ServerID
		answered    int
		skip        string // substring of the Skip error; "" for none
		dead        []assign.ServerID
		inflight    []assign.TabletID
		unreachable map[assign.ServerID]int // server → failures in a row
		reports     []assign.ServerID
	}
	for _, tc := range []struct {
		name  string
		keys  map[string]coord.Entry
		lists map[assign.ServerID]listAnswer
		mem   func(*memory)
		// partial: METADATA was not read whole this round.
		partial bool
		want    want
	}{{
		name:  "every server answers",
		keys:  map[string]coord.Entry{coord.ServerKey("a"): held("a:1"), coord.ServerKey("b"): held("b:1")},
		lists: map[assign.ServerID]listAnswer{"a": {Served: served("t1")}, "b": {Served: served("t2")}},
		want: want{
			live:     map[assign.ServerID][]assign.TabletID{"a": {"t1"}, "b": {"t2"}},
			answered: 2, reports: []assign.ServerID{"a", "b"}, unreachable: map[assign.ServerID]int{},
		},
	}, {
		name:  "a released key keeps its last report and METADATA's tablets, draining",
		keys:  map[string]coord.Entry{coord.ServerKey("a"): released("a:1"), coord.ServerKey("b"): held("b:1")},
		lists: map[assign.ServerID]listAnswer{"b": {Served: served("t2")}},
		mem: func(m *memory) {
			m.reports["a"] = served("tx") // reported before, METADATA not yet updated
			m.unreachable["a"] = &failing{key: coord.ServerKey("a"), since: now.Add(-time.Minute), count: 5}
		},
		want: want{
			live:     map[assign.ServerID][]assign.TabletID{"a": {"tx", "t1", "(draining)"}, "b": {"t2"}},
			released: []assign.ServerID{"a"}, answered: 1, reports: []assign.ServerID{"a", "b"},
			unreachable: map[assign.ServerID]int{},
		},
	}, {
		name:  "an unreachable server that reported before keeps its report",
		keys:  map[string]coord.Entry{coord.ServerKey("a"): held("a:1"), coord.ServerKey("b"): held("b:1")},
		lists: map[assign.ServerID]listAnswer{"a": {Err: down}, "b": {Served: served("t2")}},
		mem: func(m *memory) {
			m.reports["a"] = served("t1")
			m.unreachable["a"] = &failing{key: coord.ServerKey("a"), since: now.Add(-time.Second), count: 2}
		},
		want: want{
			live:     map[assign.ServerID][]assign.TabletID{"a": {"t1"}, "b": {"t2"}},
			answered: 1, reports: []assign.ServerID{"a", "b"}, unreachable: map[assign.ServerID]int{"a": 3},
		},
	}, {
		name:  "an unreachable server that never reported skips the round, keeping the bookkeeping",
		keys:  map[string]coord.Entry{coord.ServerKey("a"): held("a:1"), coord.ServerKey("b"): held("b:1")},
		lists: map[assign.ServerID]listAnswer{"a": {Err: down}, "b": {Served: served("t2")}},
		mem: func(m *memory) {
			m.reports["gone"] = served("t9")
			m.inflight["t1"] = &request{InFlight: assign.InFlight{Kind: assign.LoadRequest, Tablet: "t1", Server: "b"}, sent: now}
			m.dead["dead1"] = assign.LogSorted
		},
		want: want{
			live: map[assign.ServerID][]assign.TabletID{"b": {"t2"}}, skip: "list a: connection refused",
			answered: 1, reports: []assign.ServerID{"b", "gone"}, unreachable: map[assign.ServerID]int{"a": 1},
			inflight: []assign.TabletID{"t1"}, dead: []assign.ServerID{"dead1"},
		},
	}, {
		name:  "settling: loads confirmed, dropped tablets' requests and recovered dead servers forgotten",
		keys:  map[string]coord.Entry{coord.ServerKey("a"): held("a:1"), coord.ServerKey("b"): held("b:1")},
		lists: map[assign.ServerID]listAnswer{"a": {Served: served("t1", "t3")}, "b": {Served: served()}},
		mem: func(m *memory) {
			m.reports["gone"] = served("t9")
			m.inflight["t1"] = &request{InFlight: assign.InFlight{Kind: assign.LoadRequest, Tablet: "t1", Server: "a"}, sent: now}
			m.inflight["t2"] = &request{InFlight: assign.InFlight{Kind: assign.LoadRequest, Tablet: "t2", Server: "b"}, sent: now.Add(-time.Second)}
			m.inflight["t9"] = &request{InFlight: assign.InFlight{Kind: assign.LoadRequest, Tablet: "t9", Server: "b"}, sent: now}
			m.dead["dead1"] = assign.LogSorted // t3 is served again: recovered
			m.dead["dead2"] = assign.LogSorting
		},
		want: want{
			live:     map[assign.ServerID][]assign.TabletID{"a": {"t1", "t3"}, "b": {}},
			answered: 2, reports: []assign.ServerID{"a", "b"}, unreachable: map[assign.ServerID]int{},
			inflight: []assign.TabletID{"t2"},
		},
	}, {
		// t1 was loaded (its call returned) and is missing from the List
		// asked since: unloaded meanwhile, no confirmation can come, so
		// its record goes — unless the target did not answer this round
		// (t3 on c: its last report stands in). t2's load is unanswered
		// (its call failed: the outcome is unknown), so it waits for the
		// timeout.
		name: "settling: loads answered then gone from a server that answers are over",
		keys: map[string]coord.Entry{coord.ServerKey("a"): held("a:1"), coord.ServerKey("b"): held("b:1"), coord.ServerKey("c"): held("c:1")},
		lists: map[assign.ServerID]listAnswer{
			"a": {Served: served()}, "b": {Served: served()}, "c": {Err: down},
		},
		mem: func(m *memory) {
			m.reports["c"] = served()
			m.inflight["t1"] = &request{InFlight: assign.InFlight{Kind: assign.LoadRequest, Tablet: "t1", Server: "a"}, sent: now, loaded: true}
			m.inflight["t2"] = &request{InFlight: assign.InFlight{Kind: assign.LoadRequest, Tablet: "t2", Server: "b"}, sent: now}
			m.inflight["t3"] = &request{InFlight: assign.InFlight{Kind: assign.LoadRequest, Tablet: "t3", Server: "c"}, sent: now, loaded: true}
		},
		want: want{
			live:     map[assign.ServerID][]assign.TabletID{"a": {}, "b": {}, "c": {}},
			answered: 2, reports: []assign.ServerID{"a", "b", "c"}, unreachable: map[assign.ServerID]int{"c": 1},
			inflight: []assign.TabletID{"t2", "t3"},
		},
	}, {
		// The same with METADATA read in part: the rows not read are not
		// dropped, nor are the dead servers' other tablets recovered.
		name:  "settling from METADATA read in part: dropped tablets' requests and dead servers kept",
		keys:  map[string]coord.Entry{coord.ServerKey("a"): held("a:1"), coord.ServerKey("b"): held("b:1")},
		lists: map[assign.ServerID]listAnswer{"a": {Served: served("t1", "t3")}, "b": {Served: served()}},
		mem: func(m *memory) {
			m.inflight["t1"] = &request{InFlight: assign.InFlight{Kind: assign.LoadRequest, Tablet: "t1", Server: "a"}, sent: now}
			m.inflight["t9"] = &request{InFlight: assign.InFlight{Kind: assign.LoadRequest, Tablet: "t9", Server: "b"}, sent: now}
			m.dead["dead1"] = assign.LogSorted
		},
		partial: true,
		want: want{
			live:     map[assign.ServerID][]assign.TabletID{"a": {"t1", "t3"}, "b": {}},
			answered: 2, reports: []assign.ServerID{"a", "b"}, unreachable: map[assign.ServerID]int{},
			inflight: []assign.TabletID{"t9"}, dead: []assign.ServerID{"dead1"},
		},
	}, {
		name:  "a dead server is not live, and stays dead while a tablet of its waits",
		keys:  map[string]coord.Entry{coord.ServerKey("a"): held("a:1"), coord.ServerKey("dead1"): held("d:1")},
		lists: map[assign.ServerID]listAnswer{"a": {Served: served("t1", "t2")}},
		mem:   func(m *memory) { m.dead["dead1"] = assign.LogUnsorted },
		want: want{
			live:     map[assign.ServerID][]assign.TabletID{"a": {"t1", "t2"}},
			answered: 1, reports: []assign.ServerID{"a"}, unreachable: map[assign.ServerID]int{},
			dead: []assign.ServerID{"dead1"},
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			m := newMemory()
			if tc.mem != nil {
				tc.mem(&m)
			}
			v := roundView{Tablets: tablets, Partial: tc.partial, Keys: tc.keys, Lists: tc.lists, Now: now}
			// The servers a round asks are exactly those it has answers for.
			asked := v.toList(m.dead)
			if got := slices.Sorted(maps.Keys(tc.lists)); !slices.Equal(asked, got) {
				t.Fatalf("toList = %v, want %v", asked, got)
			}
			o := buildState(v, &m, 0)
			w := tc.want
			if got := liveView(o.State); !reflect.DeepEqual(got, w.live) {
				t.Errorf("live = %v, want %v", got, w.live)
			}
			if got := slices.Sorted(maps.Keys(o.Released)); !slices.Equal(got, w.released) {
				t.Errorf("released = %v, want %v", got, w.released)
			}
			if o.Answered != w.answered {
				t.Errorf("answered = %d, want %d", o.Answered, w.answered)
			}
			if (o.Skip == nil) != (w.skip == "") || (o.Skip != nil && !strings.Contains(o.Skip.Error(), w.skip)) {
				t.Errorf("skip = %v, want %q", o.Skip, w.skip)
			}
			if got := slices.Sorted(maps.Keys(m.dead)); !slices.Equal(got, w.dead) {
				t.Errorf("dead = %v, want %v", got, w.dead)
			}
			if got := slices.Sorted(maps.Keys(m.inflight)); !slices.Equal(got, w.inflight) {
				t.Errorf("in flight = %v, want %v", got, w.inflight)
			}
			gotUnreachable := make(map[assign.ServerID]int)
			for id, f := range m.unreachable {
				gotUnreachable[id] = f.count
			}
			if !reflect.DeepEqual(gotUnreachable, w.unreachable) {
				t.Errorf("unreachable = %v, want %v", gotUnreachable, w.unreachable)
			}
			if got := slices.Sorted(maps.Keys(m.reports)); !slices.Equal(got, w.reports) {
				t.Errorf("reports of %v, want %v", got, w.reports)
			}
			if o.Skip == nil {
				// The State carries what the memory now holds.
				var dead []assign.ServerID
				for _, d := range o.State.Dead {
					dead = append(dead, d.ID)
				}
				if !slices.Equal(dead, w.dead) {
					t.Errorf("State.Dead = %v, want %v", dead, w.dead)
				}
				for _, in := range o.State.InFlight {
					if want := now.Sub(m.inflight[in.Tablet].sent); in.Age != want {
						t.Errorf("age of %s = %v, want %v", in.Tablet, in.Age, want)
					}
				}
			}
		})
	}
}

func TestPendingSplits(t *testing.T) {
	tablets := []assign.Tablet{{ID: "c1"}, {ID: "c2"}, {ID: "p2"}, {ID: "d1"}}
	splits := []assign.Split{
		{Parent: "p1", Children: []assign.TabletID{"c1", "c2"}}, // reflected: dropped
		{Parent: "p2", Children: []assign.TabletID{"x1"}},       // parent still listed
		{Parent: "p3", Children: []assign.TabletID{"d1", "d2"}}, // a child missing
	}
	gone := map[assign.TabletID]int{}
	got := pendingSplits(slices.Clone(splits), tablets, gone)
	if want := splits[1:]; !reflect.DeepEqual(got, want) {
		t.Fatalf("pending = %v, want %v", got, want)
	}
	// The child d2 never shows (it split again before the master read
	// it): the report goes once its parent has been gone for more than
	// splitReportRounds reads.
	for read := 2; read <= splitReportRounds; read++ {
		got = pendingSplits(got, tablets, gone)
		if want := splits[1:]; !reflect.DeepEqual(got, want) {
			t.Fatalf("read %d: pending = %v, want %v", read, got, want)
		}
	}
	got = pendingSplits(got, tablets, gone)
	if want := splits[1:2]; !reflect.DeepEqual(got, want) {
		t.Fatalf("after %d reads: pending = %v, want %v", splitReportRounds+1, got, want)
	}
	if len(gone) != 0 {
		t.Fatalf("counts of dropped reports kept: %v", gone)
	}
}

// A server whose List keeps failing has its session ended after three
// failures over UnreachableAfter, or over GoneAfter when every failure
// said nothing listens at its address.
func TestFailingServerDue(t *testing.T) {
	t0 := time.Unix(100, 0)
	const unreachable, gone = 3 * time.Second, time.Second
	ms := time.Millisecond
	for _, c := range []struct {
		name string
		// failures: each one's time after t0, and whether it said gone.
		failures []time.Duration
		goneAt   []bool
		at       time.Duration // when due is asked
		want     bool
	}{
		{"three gone over 1s", []time.Duration{0, 500 * ms, time.Second}, []bool{true, true, true}, time.Second, true},
		{"three gone over 0.9s", []time.Duration{0, 450 * ms, 900 * ms}, []bool{true, true, true}, 900 * ms, false},
		{"two gone over 2s: too few attempts", []time.Duration{0, 2 * time.Second}, []bool{true, true}, 2 * time.Second, false},
		{"silence last: not gone", []time.Duration{0, 500 * ms, time.Second, 2 * time.Second}, []bool{true, true, true, false}, 2 * time.Second, false},
		{"gone in between: the run counts, not the first", []time.Duration{0, 500 * ms, time.Second, 1500 * ms}, []bool{true, false, true, true}, 1500 * ms, false},
		// A server killed and started again on its address: a silent
		// failure while the new process starts, then it answers as itself.
		{"silence, then three gone over 1s", []time.Duration{0, 1200 * ms, 1700 * ms, 2200 * ms}, []bool{false, true, true, true}, 2200 * ms, true},
		{"silence, long enough", []time.Duration{0, time.Second, 2 * time.Second, 3 * time.Second}, []bool{false, false, false, false}, 3 * time.Second, true},
		{"silence, not long enough", []time.Duration{0, 300 * ms, 600 * ms, 900 * ms, 1200 * ms, 1500 * ms, 1800 * ms, 2100 * ms, 2900 * ms}, make([]bool, 9), 2900 * ms, false},
	} {
		f := &failing{since: t0}
		for i, d := range c.failures {
			f.note(t0.Add(d), c.goneAt[i])
		}
		if got := f.due(t0.Add(c.at), unreachable, gone); got != c.want {
			t.Errorf("%s: due %v, want %v", c.name, got, c.want)
		}
	}
}

// A server's failing time counts from when its first failed List was
// sent, not from when the answers were in: a List that timed out was a
// whole ListTimeout of silence already.
func TestFailingCountsFromTheAsking(t *testing.T) {
	t0 := time.Unix(100, 0)
	keys := map[string]coord.Entry{coord.ServerKey("a"): held("a"), coord.ServerKey("b"): held("b")}
	m := newMemory()
	lists := map[assign.ServerID]listAnswer{"a": {Served: served("t1")}, "b": {Served: served("t2")}}
	if o := buildState(roundView{Keys: keys, Lists: lists, Asked: t0, Now: t0}, &m, 0); o.Skip != nil {
		t.Fatal(o.Skip)
	}
	lists["b"] = listAnswer{Err: context.DeadlineExceeded}
	asked := t0.Add(time.Second)
	buildState(roundView{Keys: keys, Lists: lists, Asked: asked, Now: asked.Add(2 * time.Second)}, &m, 0)
	f := m.unreachable["b"]
	if f == nil || !f.since.Equal(asked) || f.count != 1 {
		t.Fatalf("failing record of b: %+v, want one failure since %v", f, asked)
	}
	// A later failure keeps the first one's time; an answer clears it.
	buildState(roundView{Keys: keys, Lists: lists, Asked: asked.Add(3 * time.Second), Now: asked.Add(3500 * time.Millisecond)}, &m, 0)
	if f := m.unreachable["b"]; f == nil || !f.since.Equal(asked) || f.count != 2 {
		t.Fatalf("after a second failure: %+v, want two since %v", f, asked)
	}
	lists["b"] = listAnswer{Served: served("t2")}
	buildState(roundView{Keys: keys, Lists: lists, Asked: asked.Add(4 * time.Second), Now: asked.Add(4 * time.Second)}, &m, 0)
	if f := m.unreachable["b"]; f != nil {
		t.Fatalf("after an answer: still failing %+v", f)
	}
}

// TestLoadedAgo: once a server's report confirms a load the master sent,
// later rounds' States say how long ago (Served.LoadedAgo), on that
// server's report only and without changing the report the master keeps;
// a server that stops answering keeps it, one that answers without the
// tablet (it moved on) forgets it, as does a load older than landedKept.
func TestLoadedAgo(t *testing.T) {
	t0 := time.Unix(100, 0)
	tablets := []assign.Tablet{{ID: "t1", Table: "t", End: "m"}, {ID: "t2", Table: "t", Start: "m"}}
	keys := map[string]coord.Entry{coord.ServerKey("a"): held("a"), coord.ServerKey("b"): held("b")}
	m := newMemory()
	m.inflight["t1"] = &request{InFlight: assign.InFlight{Kind: assign.LoadRequest, Tablet: "t1", Server: "a"}, sent: t0}
	round := func(at time.Time, lists map[assign.ServerID]listAnswer) map[assign.ServerID]map[assign.TabletID]time.Duration {
		t.Helper()
		o := buildState(roundView{Tablets: tablets, Whole: true, Keys: keys, Lists: lists, Asked: at, Now: at}, &m, time.Hour)
		if o.Skip != nil {
			t.Fatal(o.Skip)
		}
		out := make(map[assign.ServerID]map[assign.TabletID]time.Duration)
		for _, s := range o.State.Live {
			out[s.ID] = make(map[assign.TabletID]time.Duration)
			for _, sv := range s.Serving {
				out[s.ID][sv.ID] = sv.LoadedAgo
			}
		}
		return out
	}
	check := func(got map[assign.ServerID]map[assign.TabletID]time.Duration, want map[assign.ServerID]map[assign.TabletID]time.Duration) {
		t.Helper()
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("LoadedAgo by server: got %v, want %v", got, want)
		}
	}
	both := map[assign.ServerID]listAnswer{"a": {Served: served("t1")}, "b": {Served: served("t2")}}
	// The round that confirms the load already tells its age: a
	// nanosecond, not 0 (no load remembered).
	check(round(t0.Add(time.Second), both), map[assign.ServerID]map[assign.TabletID]time.Duration{
		"a": {"t1": time.Nanosecond}, "b": {"t2": 0}})
	check(round(t0.Add(4*time.Second), both), map[assign.ServerID]map[assign.TabletID]time.Duration{
		"a": {"t1": 3 * time.Second}, "b": {"t2": 0}})
	if got := m.reports["a"][0].LoadedAgo; got != 0 {
		t.Fatalf("the master's record of a's report was changed: LoadedAgo %v", got)
	}
	// a stops answering: its last report stands, and so does the load.
	check(round(t0.Add(5*time.Second), map[assign.ServerID]listAnswer{"a": {Err: context.DeadlineExceeded}, "b": both["b"]}),
		map[assign.ServerID]map[assign.TabletID]time.Duration{"a": {"t1": 4 * time.Second}, "b": {"t2": 0}})
	// a answers without t1, now on b (moved by an operator): forgotten;
	// b's copy was not loaded by this master.
	check(round(t0.Add(6*time.Second), map[assign.ServerID]listAnswer{"a": {Served: served()}, "b": {Served: served("t1", "t2")}}),
		map[assign.ServerID]map[assign.TabletID]time.Duration{"a": {}, "b": {"t1": 0, "t2": 0}})
	if _, ok := m.landed["t1"]; ok {
		t.Fatal("a load of a tablet its server no longer reports is remembered")
	}
	// A load older than landedKept is forgotten.
	m.landed["t2"] = landing{server: "b", at: t0.Add(7 * time.Second)}
	check(round(t0.Add(8*time.Second), map[assign.ServerID]listAnswer{"a": {Served: served()}, "b": {Served: served("t1", "t2")}}),
		map[assign.ServerID]map[assign.TabletID]time.Duration{"a": {}, "b": {"t1": 0, "t2": time.Second}})
	check(round(t0.Add(8*time.Second+landedKept), map[assign.ServerID]listAnswer{"a": {Served: served()}, "b": {Served: served("t1", "t2")}}),
		map[assign.ServerID]map[assign.TabletID]time.Duration{"a": {}, "b": {"t1": 0, "t2": 0}})
}

// TestOrphans: a tablet a server reports and METADATA lacks is given to
// the planner as an orphan only once METADATA, read whole in every round,
// has lacked it for the grace; again every grace while it stays; never
// from a round that could not read all of METADATA (which starts its
// time again), nor from a server that did not answer; and it is
// forgotten once no longer reported.
func TestOrphans(t *testing.T) {
	const grace = time.Minute
	t0 := time.Unix(1000, 0)
	tablets := []assign.Tablet{{ID: "t1"}, {ID: "t2"}}
	keys := map[string]coord.Entry{coord.ServerKey("a"): held("a"), coord.ServerKey("b"): held("b")}
	m := newMemory()
	round := func(at time.Duration, whole bool, lists map[assign.ServerID]listAnswer) []assign.Orphan {
		t.Helper()
		o := buildState(roundView{Tablets: tablets, Whole: whole, Keys: keys, Lists: lists, Now: t0.Add(at)}, &m, grace)
		if o.Skip != nil {
			t.Fatal(o.Skip)
		}
		return o.State.Orphans
	}
	both := map[assign.ServerID]listAnswer{"a": {Served: served("t1", "x")}, "b": {Served: served("t2")}}
	want := func(what string, got []assign.Orphan, w ...assign.Orphan) {
		t.Helper()
		if !slices.Equal(got, w) {
			t.Fatalf("%s: orphans %v, want %v", what, got, w)
		}
	}
	x := assign.Orphan{Server: "a", Tablet: "x"}
	want("first seen", round(0, true, both))
	want("before the grace", round(59*time.Second, true, both))
	want("at the grace", round(grace, true, both), x)
	want("given a moment ago", round(grace+time.Second, true, both))
	want("a grace later, still there", round(2*grace, true, both), x)

	// A round with METADATA read in part forgets it: its time starts again.
	want("METADATA read in part", round(2*grace+time.Second, false, both))
	want("whole again", round(2*grace+2*time.Second, true, both))
	want("a grace after the partial read", round(3*grace+2*time.Second, true, both), x)

	// A server that does not answer keeps its last report, but its
	// unknown tablets do not count meanwhile.
	m = newMemory()
	want("first seen", round(0, true, both))
	silent := map[assign.ServerID]listAnswer{"a": {Err: errors.New("timeout")}, "b": {Served: served("t2")}}
	want("its server silent", round(grace, true, silent))
	want("it answers again", round(grace+time.Second, true, both), x)

	// Gone from the report: forgotten.
	m = newMemory()
	want("first seen", round(0, true, both))
	without := map[assign.ServerID]listAnswer{"a": {Served: served("t1")}, "b": {Served: served("t2")}}
	want("no longer reported", round(time.Second, true, without))
	want("reported again", round(grace, true, both))
	want("a grace after it came back", round(2*grace, true, both), x)

	// No grace: never.
	m = newMemory()
	if o := buildState(roundView{Tablets: tablets, Whole: true, Keys: keys, Lists: both, Now: t0}, &m, 0); len(o.State.Orphans) != 0 {
		t.Fatalf("orphans without a grace: %v", o.State.Orphans)
	}
	if o := buildState(roundView{Tablets: tablets, Whole: true, Keys: keys, Lists: both, Now: t0.Add(time.Hour)}, &m, 0); len(o.State.Orphans) != 0 {
		t.Fatalf("orphans without a grace: %v", o.State.Orphans)
	}
}
