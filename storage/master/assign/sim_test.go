package assign

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"
)

// sim is a toy cluster driven by Plan: tablet servers that load, unload,
// split and die, a network that delays and loses requests, and a master
// loop that records requests in flight and reads METADATA. It checks after
// every step that no row is served by two live servers.
type sim struct {
	t   *testing.T
	rng *rand.Rand
	cfg Config

	truth    map[TabletID]Tablet // METADATA as written
	view     map[TabletID]Tablet // METADATA as the master last read it
	children map[TabletID][]TabletID
	servers  map[ServerID]*simServer
	dead     []DeadServer
	inFlight map[TabletID]InFlight // the master's record, one per tablet
	network  []msg
	reports  []Split
	merges   []MergeUnderway
	nextID   int

	deliver, lose float64 // per step, per message
	rounds, moves int
	seen          map[string]int // actions by kind and reason, for coverage
}

type simServer struct {
	id       ServerID
	draining bool
	serving  map[TabletID]bool
}

type msg struct {
	kind   RequestKind
	tablet TabletID
	server ServerID
	to     ServerID
}

func newSim(t *testing.T, seed uint64, nServers, nTablets int) *sim {
	s := &sim{
		t: t, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		cfg:      Config{LoadTimeout: 3 * time.Second, SortLogMin: 3, MaxMoves: 4, SplitSize: 1000, MergeBelow: 150, MaxMerges: 2},
		truth:    make(map[TabletID]Tablet),
		view:     make(map[TabletID]Tablet),
		children: make(map[TabletID][]TabletID),
		servers:  make(map[ServerID]*simServer),
		inFlight: make(map[TabletID]InFlight),
		deliver:  0.6, lose: 0.05,
		seen: make(map[string]int),
	}
	for _, tb := range append(metaTablets(2), userTablets(nTablets, 0)...) {
		tb.Size = 50 + s.rng.Int64N(400)
		s.truth[tb.ID] = tb
	}
	s.readMetadata("")
	for i := 0; i < nServers; i++ {
		s.join()
	}
	return s
}

func (s *sim) id(prefix string) string {
	s.nextID++
	return fmt.Sprintf("%s%04d", prefix, s.nextID)
}

func (s *sim) join() {
	id := ServerID(s.id("s"))
	s.servers[id] = &simServer{id: id, serving: make(map[TabletID]bool)}
}

// readMetadata refreshes the master's view of table ("" = all).
func (s *sim) readMetadata(table string) {
	for id, tb := range s.view {
		if table == "" || tb.Table == table {
			delete(s.view, id)
		}
	}
	for id, tb := range s.truth {
		if table == "" || tb.Table == table {
			s.view[id] = tb
		}
	}
	s.reports = slices.DeleteFunc(s.reports, func(r Split) bool { _, ok := s.view[r.Parent]; return !ok })
}

func (s *sim) sortedServers() []*simServer {
	var ids []ServerID
	for id := range s.servers {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	var out []*simServer
	for _, id := range ids {
		out = append(out, s.servers[id])
	}
	return out
}

func sortedIDs[V any](m map[TabletID]V) []TabletID {
	var ids []TabletID
	for id := range m {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

func (s *sim) state() State {
	var st State
	for _, sv := range s.sortedServers() {
		srv := Server{ID: sv.id, Draining: sv.draining}
		for _, id := range sortedIDs(sv.serving) {
			tb := s.truth[id]
			srv.Serving = append(srv.Serving, Served{ID: id, Table: tb.Table, Start: tb.Start, End: tb.End, Bytes: tb.Size})
		}
		st.Live = append(st.Live, srv)
	}
	st.Dead = slices.Clone(s.dead)
	for _, id := range sortedIDs(s.view) {
		st.Tablets = append(st.Tablets, s.view[id])
	}
	for _, id := range sortedIDs(s.inFlight) {
		st.InFlight = append(st.InFlight, s.inFlight[id])
	}
	st.Splits = slices.Clone(s.reports)
	st.Merges = slices.Clone(s.merges)
	return st
}

// step runs one round: plan, check and apply the actions, deliver some
// messages, age requests. It returns the actions.
func (s *sim) step() []Action {
	s.rounds++
	st := s.state()
	acts := Plan(st, s.cfg)
	assigned := make(map[TabletID]bool)
	unloads := 0
	for _, r := range st.InFlight {
		if r.Kind == UnloadRequest {
			if sv, ok := s.servers[r.Server]; ok && sv.serving[r.Tablet] {
				unloads++
			}
		}
	}
	for _, a := range acts {
		s.seen[a.Kind.String()+"/"+a.Reason]++
		switch a.Kind {
		case Assign:
			if assigned[a.Tablet] {
				s.t.Fatalf("round %d: %s twice in one plan", s.rounds, a.Tablet)
			}
			assigned[a.Tablet] = true
			s.checkAssign(a)
			s.send(msg{LoadRequest, a.Tablet, a.Server, ""})
		case Unassign:
			if a.Reason == "balance" || a.Reason == "drain" {
				unloads++
				s.moves++
			}
			s.send(msg{UnloadRequest, a.Tablet, a.Server, a.To})
		case Rescan:
			s.readMetadata(a.Table)
		case SortLog:
			for i := range s.dead {
				if s.dead[i].ID == a.Server {
					s.dead[i].Log = LogSorting
				}
			}
		case Merge:
			s.merges = append(s.merges, MergeUnderway{a.Table, a.Tablet, a.Right})
		}
	}
	if unloads > s.cfg.MaxMoves {
		s.t.Fatalf("round %d: %d moves under way, MaxMoves %d%s", s.rounds, unloads, s.cfg.MaxMoves, describe(acts))
	}
	s.advance()
	s.checkSafety()
	s.leave()
	return acts
}

// send records a request as in flight and sends it, cancelling any older
// request for the same tablet (an RPC the master gave up on; a real load
// is also fenced by the epoch in METADATA).
func (s *sim) send(m msg) {
	s.network = slices.DeleteFunc(s.network, func(o msg) bool { return o.tablet == m.tablet })
	s.inFlight[m.tablet] = InFlight{Kind: m.kind, Tablet: m.tablet, Server: m.server, To: m.to}
	s.network = append(s.network, m)
}

// checkAssign fails if a tablet is assigned while a live server serves a
// row of it, or while a load of it to another live server may still land.
func (s *sim) checkAssign(a Action) {
	tb, ok := s.view[a.Tablet]
	if !ok {
		s.t.Fatalf("round %d: %s of a tablet the master does not know", s.rounds, a)
	}
	if sv, live := s.servers[a.Server]; !live || sv.draining && a.Reason != "timeout" && a.Reason != "failed" {
		s.t.Fatalf("round %d: %s to a server not live and active", s.rounds, a)
	}
	for _, sv := range s.servers {
		for id := range sv.serving {
			o := s.truth[id]
			if id == a.Tablet && sv.id == a.Server {
				s.t.Fatalf("round %d: %s already served there", s.rounds, a)
			}
			if id == a.Tablet || (span{o.Table, o.Start, o.End, ""}).overlaps(span{tb.Table, tb.Start, tb.End, ""}) {
				s.t.Fatalf("round %d: %s while %s serves %s", s.rounds, a, sv.id, id)
			}
		}
	}
	for _, m := range s.network {
		if m.kind == LoadRequest && m.tablet == a.Tablet && m.server != a.Server {
			if _, live := s.servers[m.server]; live {
				s.t.Fatalf("round %d: %s while a load to %s is in transit", s.rounds, a, m.server)
			}
		}
	}
}

func (s *sim) checkSafety() {
	type owned struct {
		sp span
		sv ServerID
	}
	var all []owned
	for _, sv := range s.sortedServers() {
		for _, id := range sortedIDs(sv.serving) {
			tb := s.truth[id]
			all = append(all, owned{span{tb.Table, tb.Start, tb.End, id}, sv.id})
		}
	}
	for i := range all {
		for j := i + 1; j < len(all); j++ {
			if all[i].sv != all[j].sv && all[i].sp.overlaps(all[j].sp) {
				s.t.Fatalf("round %d: %s on %s and %s on %s overlap", s.rounds, all[i].sp.id, all[i].sv, all[j].sp.id, all[j].sv)
			}
		}
	}
}

// advance delivers or loses messages, finishes log sorts and merges, and
// ages the master's records.
func (s *sim) advance() {
	var keep []msg
	for _, m := range s.network {
		r := s.rng.Float64()
		switch {
		case r < s.lose:
			// lost: the master's record times out
		case r < s.lose+s.deliver:
			s.receive(m)
		default:
			keep = append(keep, m)
		}
	}
	s.network = keep
	for i := range s.dead {
		if s.dead[i].Log == LogSorting {
			s.dead[i].Log = LogSorted
		}
	}
	for _, mg := range s.merges {
		s.finishMerge(mg)
	}
	s.merges = nil
	for id, r := range s.inFlight {
		r.Age += time.Second
		s.inFlight[id] = r
	}
}

func (s *sim) receive(m msg) {
	sv, ok := s.servers[m.server]
	if !ok {
		return // dead: its requests die with it
	}
	// A confirmed load is no longer in flight; a confirmed unload's record
	// stays until the next Assign, so that its To is honoured.
	if r, ok := s.inFlight[m.tablet]; ok && r.Server == m.server && r.Kind == LoadRequest && m.kind == LoadRequest {
		delete(s.inFlight, m.tablet)
	}
	switch m.kind {
	case LoadRequest:
		tb, ok := s.truth[m.tablet]
		if !ok {
			// METADATA says it split (or merged): refuse and tell the
			// master, as the paper's server does.
			if ch := s.children[m.tablet]; len(ch) > 0 {
				s.reports = append(s.reports, Split{Server: sv.id, Table: s.view[m.tablet].Table, Parent: m.tablet, Children: ch})
			}
			return
		}
		sv.serving[m.tablet] = true
		tb.LastServer = sv.id
		s.truth[m.tablet] = tb
		if _, ok := s.view[m.tablet]; ok {
			s.view[m.tablet] = tb
		}
	case UnloadRequest:
		delete(sv.serving, m.tablet)
	}
}

func (s *sim) finishMerge(mg MergeUnderway) {
	l, okl := s.truth[mg.Left]
	r, okr := s.truth[mg.Right]
	if !okl || !okr {
		return
	}
	for _, sv := range s.servers {
		delete(sv.serving, mg.Left)
		delete(sv.serving, mg.Right)
	}
	delete(s.truth, mg.Left)
	delete(s.truth, mg.Right)
	delete(s.inFlight, mg.Left)
	delete(s.inFlight, mg.Right)
	m := Tablet{ID: TabletID(s.id("m")), Table: l.Table, Start: l.Start, End: r.End, Size: l.Size + r.Size}
	s.truth[m.ID] = m
	s.readMetadata(l.Table) // the master committed it
}

// event applies one random change to the cluster.
func (s *sim) event() {
	all := s.sortedServers()
	var active []*simServer
	for _, sv := range all {
		if !sv.draining {
			active = append(active, sv)
		}
	}
	switch r := s.rng.IntN(100); {
	case r < 10:
		s.join()
	case r < 18 && len(active) > 2: // kill -9; the master takes its lock
		sv := active[s.rng.IntN(len(active))]
		delete(s.servers, sv.id)
		s.dead = append(s.dead, DeadServer{ID: sv.id})
	case r < 24 && len(active) > 2:
		active[s.rng.IntN(len(active))].draining = true
	case r < 60:
		s.split()
	}
}

// leave lets drained servers go (releasing their lock: not dead) once
// nothing is on its way to them.
func (s *sim) leave() {
	for _, sv := range s.sortedServers() {
		busy := slices.ContainsFunc(s.network, func(m msg) bool { return m.server == sv.id })
		for _, r := range s.inFlight {
			busy = busy || r.Server == sv.id && r.Kind == LoadRequest
		}
		if sv.draining && len(sv.serving) == 0 && !busy {
			delete(s.servers, sv.id)
		}
	}
}

// split splits a random served user tablet on its server, committing to
// METADATA; half the notifications are lost.
func (s *sim) split() {
	type cand struct {
		sv *simServer
		id TabletID
	}
	var cs []cand
	for _, sv := range s.sortedServers() {
		for _, id := range sortedIDs(sv.serving) {
			if tb := s.truth[id]; tb.Kind == User && tb.Start != "" && tb.Size >= 100 {
				if _, busy := s.inFlight[id]; !busy && !slices.ContainsFunc(s.merges, func(m MergeUnderway) bool { return m.Left == id || m.Right == id }) {
					cs = append(cs, cand{sv, id})
				}
			}
		}
	}
	if len(cs) == 0 {
		return
	}
	c := cs[s.rng.IntN(len(cs))]
	p := s.truth[c.id]
	mid := ""
	for _, suffix := range []string{"m", "g", "d", "b"} {
		if k := p.Start + suffix; p.End == "" || k < p.End {
			mid = k
			break
		}
	}
	if mid == "" {
		return
	}
	a := Tablet{ID: TabletID(s.id("c")), Table: p.Table, Start: p.Start, End: mid, Size: p.Size / 2, LastServer: c.sv.id}
	b := Tablet{ID: TabletID(s.id("c")), Table: p.Table, Start: mid, End: p.End, Size: p.Size - p.Size/2, LastServer: c.sv.id}
	delete(s.truth, p.ID)
	s.truth[a.ID], s.truth[b.ID] = a, b
	s.children[p.ID] = []TabletID{a.ID, b.ID}
	delete(c.sv.serving, p.ID)
	c.sv.serving[a.ID], c.sv.serving[b.ID] = true, true
	if s.rng.IntN(2) == 0 {
		s.reports = append(s.reports, Split{Server: c.sv.id, Table: p.Table, Parent: p.ID, Children: []TabletID{a.ID, b.ID}})
	}
}

// settle runs rounds with a perfect network until Plan has nothing to do;
// it fails after limit rounds.
func (s *sim) settle(limit int) {
	s.deliver, s.lose = 1, 0
	for i := 0; i < limit; i++ {
		s.step()
		pending := false
		for _, r := range s.inFlight {
			sv, live := s.servers[r.Server]
			pending = pending || live && (r.Kind == LoadRequest || sv.serving[r.Tablet])
		}
		if len(s.network) == 0 && !pending && len(Plan(s.state(), s.cfg)) == 0 {
			return
		}
	}
	s.t.Fatalf("no quiescence after %d rounds; last plan:%s", limit, describe(Plan(s.state(), s.cfg)))
}

func TestSimulatedClusterNeverDoubleServes(t *testing.T) {
	seeds := 60
	if os.Getenv("SIMSEEDS") != "" {
		seeds, _ = strconv.Atoi(os.Getenv("SIMSEEDS"))
	}
	if testing.Short() {
		seeds = 10
	}
	seen := make(map[string]int)
	for seed := uint64(1); seed <= uint64(seeds); seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			s := newSim(t, seed, 2+int(seed%4), 15+int(seed%20))
			for i := 0; i < 150; i++ {
				if s.rng.IntN(3) == 0 {
					s.event()
				}
				s.step()
			}
			s.settle(200)
			s.checkSettled()
			for k, n := range s.seen {
				seen[k] += n
			}
		})
	}
	// The runs must have gone through every path worth checking.
	for _, k := range []string{"assign/unassigned", "assign/dead", "assign/move", "assign/timeout",
		"unassign/balance", "unassign/drain", "unassign/timeout", "sortlog/dead", "merge/small",
		"rescan/split"} {
		if seen[k] == 0 && !testing.Short() {
			t.Errorf("no %s in %d runs: %v", k, seeds, seen)
		}
	}
	t.Logf("actions over %d runs: %v", seeds, seen)
}

// checkSettled: METADATA as read equals METADATA as written, every tablet
// served exactly once by an active server, counts within ±30% of even.
func (s *sim) checkSettled() {
	t := s.t
	if len(s.view) != len(s.truth) {
		t.Fatalf("view has %d tablets, METADATA %d", len(s.view), len(s.truth))
	}
	for id := range s.truth {
		if _, ok := s.view[id]; !ok {
			t.Fatalf("view lacks %s", id)
		}
	}
	count := make(map[ServerID]int)
	for _, sv := range s.servers {
		if sv.draining {
			t.Fatalf("draining server %s still there with %d tablets", sv.id, len(sv.serving))
		}
		count[sv.id] = len(sv.serving)
		for id := range sv.serving {
			if _, ok := s.truth[id]; !ok {
				t.Fatalf("%s serves %s, which METADATA lacks", sv.id, id)
			}
		}
	}
	served := 0
	for _, n := range count {
		served += n
	}
	if served != len(s.truth) {
		st := s.state()
		for _, id := range sortedIDs(s.truth) {
			found := false
			for _, sv := range s.servers {
				found = found || sv.serving[id]
			}
			if !found {
				t.Logf("unserved %+v inflight %+v", s.truth[id], s.inFlight[id])
			}
		}
		t.Logf("dead %+v merges %+v reports %+v live %+v", st.Dead, st.Merges, st.Splits, st.Live)
		t.Fatalf("%d tablets served, %d in METADATA", served, len(s.truth))
	}
	mean := float64(served) / float64(len(count))
	if mean >= 7 {
		for id, n := range count {
			if math.Abs(float64(n)/mean-1) > 0.3 {
				t.Errorf("%s has %d tablets, mean %.1f: %v", id, n, mean, count)
			}
		}
	}
}

// TestBalanceConverges: random sizes, server counts and starting
// placements converge within ±30% of even in tablet count and bytes, with
// at most MaxMoves moves a round, and the result is stable.
func TestBalanceConverges(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	trials := 150
	if os.Getenv("SIMSEEDS") != "" {
		trials, _ = strconv.Atoi(os.Getenv("SIMSEEDS"))
	}
	if testing.Short() {
		trials = 30
	}
	for trial := 0; trial < trials; trial++ {
		nServers := 2 + rng.IntN(9)
		nTablets := nServers * (7 + rng.IntN(30))
		maxMoves := 1 + rng.IntN(10)
		// The simulated tablets weigh megabytes: bytes count from the
		// first one (MinByteSkew), as they do in a cluster of real size.
		cfg := Config{NoMerge: true, MaxMoves: maxMoves, MinByteSkew: 1}
		st := State{Live: servers()}
		for i := 0; i < nServers; i++ {
			st.Live = append(st.Live, Server{ID: ServerID(fmt.Sprintf("s%02d", i))})
		}
		st.Tablets = userTablets(nTablets, 0)
		// Sizes vary by up to 4x; the start is skewed: all on a few servers.
		crowded := 1 + rng.IntN(nServers)
		for i := range st.Tablets {
			st.Tablets[i].Size = (1 + rng.Int64N(4)) << 20
			sv := &st.Live[rng.IntN(crowded)]
			sv.Serving = append(sv.Serving, Served{ID: st.Tablets[i].ID})
			st.Tablets[i].LastServer = sv.ID
		}
		st, rounds := converge(t, st, cfg)
		var total int64
		for _, tb := range st.Tablets {
			total += tb.Size
		}
		size := make(map[TabletID]int64)
		for _, tb := range st.Tablets {
			size[tb.ID] = tb.Size
		}
		meanC, meanB := float64(nTablets)/float64(nServers), float64(total)/float64(nServers)
		for _, sv := range st.Live {
			var b int64
			for _, x := range sv.Serving {
				b += size[x.ID]
			}
			if dc, db := float64(len(sv.Serving))/meanC-1, float64(b)/meanB-1; math.Abs(dc) > 0.3 || math.Abs(db) > 0.3 {
				t.Errorf("trial %d (%d servers, %d tablets): %s has %d tablets (%+.0f%%), %d MiB (%+.0f%%) after %d rounds",
					trial, nServers, nTablets, sv.ID, len(sv.Serving), dc*100, b>>20, db*100, rounds)
			}
		}
	}
}

// converge carries out Plan's actions on st, as a master with a perfect
// network would, until Plan has nothing to do. It checks that no round
// plans more moves than MaxMoves, and returns the final state and the
// number of rounds.
func converge(t *testing.T, st State, cfg Config) (State, int) {
	t.Helper()
	maxMoves := cfg.withDefaults().MaxMoves
	for rounds := 0; rounds < 1000; rounds++ {
		acts := Plan(st, cfg)
		if len(acts) == 0 {
			return st, rounds
		}
		if n := kinds(acts)[Unassign]; n > maxMoves {
			t.Fatalf("round %d: %d moves, MaxMoves %d", rounds, n, maxMoves)
		}
		// Carry moves out: unload, keeping the record with its
		// destination, then assign as the next plan says.
		for _, a := range acts {
			switch a.Kind {
			case Unassign:
				st.InFlight = append(st.InFlight, InFlight{Kind: UnloadRequest, Tablet: a.Tablet, Server: a.Server, To: a.To})
				for i := range st.Live {
					if st.Live[i].ID == a.Server {
						st.Live[i].Serving = slices.DeleteFunc(st.Live[i].Serving, func(s Served) bool { return s.ID == a.Tablet })
					}
				}
			case Assign:
				st.InFlight = slices.DeleteFunc(st.InFlight, func(r InFlight) bool { return r.Tablet == a.Tablet })
				for i := range st.Live {
					if st.Live[i].ID == a.Server {
						st.Live[i].Serving = append(st.Live[i].Serving, Served{ID: a.Tablet})
					}
				}
				for i := range st.Tablets { // the load records its location
					if st.Tablets[i].ID == a.Tablet {
						st.Tablets[i].LastServer = a.Server
					}
				}
			default:
				t.Fatalf("round %d: unexpected %s", rounds, a)
			}
		}
	}
	t.Fatalf("no convergence after 1000 rounds")
	return st, 0
}

// TestSplitTableSpreadsOverThreeServers is the cluster's acceptance in
// miniature: a table split into 20+ tablets on one server spreads over
// three within ±30% of even, then stays put.
func TestSplitTableSpreadsOverThreeServers(t *testing.T) {
	for _, n := range []int{20, 21, 24, 31, 47} {
		st := State{Live: servers("s1", "s2", "s3"), Tablets: append(metaTablets(1), userTablets(n, 0)...)}
		for i := range st.Tablets {
			st.Tablets[i].Size = int64(60+i%7*10) << 20 // splits leave similar sizes
			st.Live[0].Serving = append(st.Live[0].Serving, Served{ID: st.Tablets[i].ID})
			st.Tablets[i].LastServer = "s1"
		}
		st, rounds := converge(t, st, noMerge)
		mean := float64(n+2) / 3
		for _, s := range st.Live {
			if d := float64(len(s.Serving))/mean - 1; d > 0.3 || d < -0.3 {
				t.Errorf("%d tablets: %s has %d, mean %.1f", n, s.ID, len(s.Serving), mean)
			}
		}
		if acts := Plan(st, noMerge); len(acts) != 0 {
			t.Errorf("%d tablets: not stable after %d rounds:%s", n, rounds, describe(acts))
		}
	}
}
