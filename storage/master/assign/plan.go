package assign

import (
	"cmp"
	"slices"
	"time"
)

// Plan returns what the master should do now, given what it has observed.
// It is pure and deterministic: no I/O, no clock (ages come in the State),
// and the same State and Config always yield the same actions in the same
// order.
//
// Contract:
//   - An Assign is emitted only for a tablet that no live server serves,
//     that has no load in flight to a live server, and whose row range no
//     tablet served or loading elsewhere overlaps; at most one Assign per
//     tablet per Plan. Together with the master recording every Assign as
//     in flight, this keeps each tablet on at most one server.
//   - A load or unload in flight for less than Config.LoadTimeout (one
//     whose call failed: its Retry, when shorter) yields no action for its
//     tablet; after that it is sent again to the same server (a load is
//     never redirected while its target is alive).
//   - Actions come in the order: resent and duplicate requests, rescans,
//     unloads of orphans, log sorts, records of served tablets METADATA
//     does not name, assignments (root, METADATA, user tablets), drain
//     unloads, merges, balance unloads.
func Plan(st State, cfg Config) []Action {
	p := newPlanner(st, cfg.withDefaults())
	p.inFlight(st.InFlight)
	p.duplicates()
	p.unknownServed()
	p.orphans(st.Orphans)
	p.splits(st.Splits)
	p.markConflicts()
	p.record()
	p.assign()
	p.drain()
	p.merge(len(st.Merges), st.MergeRequests)
	p.balance()
	return p.out
}

// tab is a tablet as the planner tracks it through one Plan.
type tab struct {
	Tablet
	size       int64
	servers    []*srv   // live servers reporting it, by ID
	holder     *srv     // the one that keeps it
	loadTo     *srv     // live target of a load in flight
	unloadFrom *srv     // target of an unload in flight
	movingTo   ServerID // destination of a finished unload
	unloading  bool     // an unload from holder is in flight
	splitting  bool
	shares     bool // a server says its files hold rows outside its range
	merging    bool
	shadowed   bool // a split report says METADATA's view of it is stale
	conflict   bool // overlaps another tablet of METADATA as read
	acted      bool // has an action this round
	// loadedOn is the server whose load of it the master confirmed
	// loadedAgo ago (Served.LoadedAgo), nil if none it remembers.
	loadedOn  *srv
	loadedAgo time.Duration
}

// srv is a live server with its planned load.
type srv struct {
	Server
	count int
	bytes int64
	held  []*tab // tablets it keeps (holder), by order
}

type span struct {
	table, start, end string
	id                TabletID
}

// overlaps reports whether [a.start, a.end) and [b.start, b.end) of one
// table share a row; end "" is unbounded.
func (a span) overlaps(b span) bool {
	if a.table != b.table {
		return false
	}
	return (b.end == "" || a.start < b.end) && (a.end == "" || b.start < a.end)
}

type unknown struct {
	server *srv
	served Served
}

type planner struct {
	cfg      Config
	tablets  []*tab
	byID     map[TabletID]*tab
	live     []*srv
	liveByID map[ServerID]*srv
	active   []*srv
	dead     map[ServerID]DeadServer
	unknowns []unknown
	rescans  map[span]bool
	moved    int // moves planned this round
	assigned int // assignments planned this round
	out      []Action
}

func tabletOrder(a, b *tab) int {
	return cmp.Or(
		cmp.Compare(a.Kind.rank(), b.Kind.rank()),
		cmp.Compare(a.Table, b.Table),
		cmp.Compare(a.Start, b.Start),
		cmp.Compare(a.ID, b.ID),
	)
}

func newPlanner(st State, cfg Config) *planner {
	p := &planner{
		cfg:      cfg,
		byID:     make(map[TabletID]*tab),
		liveByID: make(map[ServerID]*srv),
		dead:     make(map[ServerID]DeadServer),
		rescans:  make(map[span]bool),
	}
	for _, d := range st.Dead {
		p.dead[d.ID] = d
	}
	for _, t := range st.Tablets {
		if _, dup := p.byID[t.ID]; dup {
			continue // first record wins; METADATA holds one row per tablet
		}
		tt := &tab{Tablet: t, size: t.Size}
		p.byID[t.ID] = tt
		p.tablets = append(p.tablets, tt)
	}
	slices.SortFunc(p.tablets, tabletOrder)

	live := slices.Clone(st.Live)
	slices.SortStableFunc(live, func(a, b Server) int { return cmp.Compare(a.ID, b.ID) })
	for _, s := range live {
		if _, isDead := p.dead[s.ID]; isDead {
			continue // its lock is the master's: whatever it says, it cannot serve
		}
		if _, dup := p.liveByID[s.ID]; dup {
			continue
		}
		ss := &srv{Server: s}
		p.live = append(p.live, ss)
		p.liveByID[s.ID] = ss
		if !s.Draining {
			p.active = append(p.active, ss)
		}
		served := slices.Clone(s.Serving)
		slices.SortStableFunc(served, func(a, b Served) int { return cmp.Compare(a.ID, b.ID) })
		for i, sv := range served {
			if i > 0 && served[i-1].ID == sv.ID {
				continue
			}
			t, ok := p.byID[sv.ID]
			if !ok {
				// Not METADATA's (as read), but load on ss all the same.
				p.unknowns = append(p.unknowns, unknown{ss, sv})
				ss.count++
				ss.bytes += sv.Bytes
				continue
			}
			t.servers = append(t.servers, ss)
			if sv.Bytes > 0 {
				t.size = sv.Bytes
			}
			t.splitting = t.splitting || sv.Splitting
			t.shares = t.shares || sv.SharesFiles
			if sv.LoadedAgo > 0 {
				t.loadedOn, t.loadedAgo = ss, sv.LoadedAgo
			}
		}
	}
	for _, m := range st.Merges {
		for _, id := range []TabletID{m.Left, m.Right} {
			if t, ok := p.byID[id]; ok {
				t.merging = true
			}
		}
	}
	return p
}

func (p *planner) emit(a Action) { p.out = append(p.out, a) }

func (p *planner) rescan(s span, reason string) {
	key := span{table: s.table, start: s.start, end: s.end}
	if p.rescans[key] {
		return
	}
	p.rescans[key] = true
	p.emit(Action{Kind: Rescan, Table: s.table, Start: s.start, End: s.end, Reason: reason})
}

func (t *tab) span() span { return span{t.Table, t.Start, t.End, t.ID} }

func (t *tab) servedBy(s *srv) bool { return slices.Contains(t.servers, s) }

// inFlight notes loads and unloads not yet confirmed and resends those
// past the timeout.
func (p *planner) inFlight(reqs []InFlight) {
	reqs = slices.Clone(reqs)
	slices.SortStableFunc(reqs, func(a, b InFlight) int {
		return cmp.Or(cmp.Compare(a.Tablet, b.Tablet), cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Server, b.Server))
	})
	for _, r := range reqs {
		t, ok := p.byID[r.Tablet]
		s, alive := p.liveByID[r.Server]
		if ok && r.Kind == UnloadRequest && !alive {
			t.movingTo = r.To // the source died: the move is still wanted
		}
		if !ok || !alive {
			continue // request void: tablet gone or target dead
		}
		switch r.Kind {
		case LoadRequest:
			// Confirmed if the target reports it; ignored if another server
			// already serves it (duplicates are resolved from reports).
			if len(t.servers) > 0 || t.loadTo != nil {
				continue
			}
			t.loadTo = s
			if r.Age >= r.resendAfter(p.cfg) && !t.acted {
				t.acted = true
				from, sorted := p.recovery(t)
				p.emit(Action{Kind: Assign, Tablet: t.ID, Server: s.ID, RecoverFrom: from, SortedLog: sorted, Reason: r.resendReason(p.cfg)})
			}
		case UnloadRequest:
			if !t.servedBy(s) {
				t.movingTo = r.To // done: on to its destination
				continue
			}
			if t.unloadFrom != nil {
				continue
			}
			t.unloadFrom = s
			if r.Age >= r.resendAfter(p.cfg) {
				t.acted = true
				p.emit(Action{Kind: Unassign, Tablet: t.ID, Server: s.ID, To: r.To, Reason: r.resendReason(p.cfg)})
			}
		}
	}
}

// resendReason is the Reason of load or unload r's resend: "failed" when it goes
// on the backoff of a call that failed (Retry), "timeout" when it was
// not answered within Config.LoadTimeout.
func (r InFlight) resendReason(cfg Config) string {
	if r.resendAfter(cfg) < cfg.LoadTimeout {
		return "failed"
	}
	return "timeout"
}

// resendAfter is the age at which load or unload r is sent again: Config.LoadTimeout,
// or r.Retry when shorter.
func (r InFlight) resendAfter(cfg Config) time.Duration {
	if r.Retry > 0 && r.Retry < cfg.LoadTimeout {
		return r.Retry
	}
	return cfg.LoadTimeout
}

// duplicates picks one holder per served tablet and unloads the others:
// the last METADATA location if it is among them, else the lowest ID.
func (p *planner) duplicates() {
	for _, t := range p.tablets {
		if len(t.servers) == 0 {
			continue
		}
		keep := t.servers[0]
		for _, s := range t.servers {
			if s.ID == t.LastServer {
				keep = s
			}
		}
		t.holder = keep
		// Only an unload from the holder frees the tablet for elsewhere.
		t.unloading = t.unloadFrom == keep
		if !t.unloading {
			keep.held = append(keep.held, t)
			keep.count++
			keep.bytes += t.size
		}
		for _, s := range t.servers {
			if s != keep && s != t.unloadFrom {
				t.acted = true
				p.emit(Action{Kind: Unassign, Tablet: t.ID, Server: s.ID, Reason: "duplicate"})
			}
		}
	}
	for _, t := range p.tablets {
		if t.holder == nil && t.loadTo != nil {
			t.loadTo.count++
			t.loadTo.bytes += t.size
		}
	}
}

// unknownServed handles tablets servers report that METADATA (as the
// master last read it) lacks: the range is read again, and whatever they
// overlap is not assigned meanwhile.
func (p *planner) unknownServed() {
	for _, u := range p.unknowns {
		us := span{u.served.Table, u.served.Start, u.served.End, u.served.ID}
		found := false
		for _, t := range p.tablets {
			if t.span().overlaps(us) {
				found = true
				p.rescan(t.span(), "split")
			}
		}
		if !found {
			p.rescan(us, "unknown")
		}
	}
}

// orphans unloads each of State.Orphans from its server, if live.
func (p *planner) orphans(orphans []Orphan) {
	for _, o := range orphans {
		if _, live := p.liveByID[o.Server]; live {
			p.emit(Action{Kind: Unassign, Tablet: o.Tablet, Server: o.Server, Reason: "orphan"})
		}
	}
}

// splits handles split reports: a parent METADATA (as read) still holds
// is held back and its range read again — METADATA wins.
func (p *planner) splits(reports []Split) {
	reports = slices.Clone(reports)
	slices.SortStableFunc(reports, func(a, b Split) int {
		return cmp.Or(cmp.Compare(a.Table, b.Table), cmp.Compare(a.Parent, b.Parent), cmp.Compare(a.Server, b.Server))
	})
	for _, r := range reports {
		if t, ok := p.byID[r.Parent]; ok {
			t.shadowed = true
			p.rescan(t.span(), "split")
			continue
		}
		for _, c := range r.Children {
			if _, ok := p.byID[c]; !ok {
				p.rescan(span{table: r.Table}, "split")
				break
			}
		}
	}
}

// occupied indexes the spans of tablets served or loading, and of unknown
// tablets servers report.
func (p *planner) occupied() spanIndex {
	var occ []span
	for _, t := range p.tablets {
		if t.holder != nil || t.loadTo != nil {
			occ = append(occ, t.span())
		}
	}
	for _, u := range p.unknowns {
		occ = append(occ, span{u.served.Table, u.served.Start, u.served.End, u.served.ID})
	}
	return newSpanIndex(occ)
}

// record emits a Record for each tablet served by a live server while
// METADATA names another one or none (the load's location write was lost:
// its master died or lost the lock between the load and the write — for a
// first load, METADATA names no server), unless a load of it is in flight
// (that load writes the location itself) or it is being unloaded, split,
// merged, or its METADATA view is in doubt.
func (p *planner) record() {
	for _, t := range p.tablets {
		if t.holder == nil || t.holder.ID == t.LastServer || t.unloading || t.loadTo != nil ||
			t.splitting || t.merging || t.shadowed || t.conflict || t.acted {
			continue
		}
		t.acted = true
		p.emit(Action{Kind: Record, Tablet: t.ID, Server: t.holder.ID, Reason: "unrecorded"})
	}
}

// markConflicts flags tablets whose ranges overlap in METADATA as read: a
// view caught between two reads. They are held until a rescan.
func (p *planner) markConflicts() {
	byTable := make(map[string][]*tab)
	var tables []string
	for _, t := range p.tablets {
		if _, ok := byTable[t.Table]; !ok {
			tables = append(tables, t.Table)
		}
		byTable[t.Table] = append(byTable[t.Table], t)
	}
	for _, table := range tables {
		ts := byTable[table]
		slices.SortStableFunc(ts, func(a, b *tab) int { return cmp.Compare(a.Start, b.Start) })
		var reach end // furthest end so far
		var last *tab // the tablet reaching it
		for i, t := range ts {
			if i > 0 && reach.after(t.Start) {
				t.conflict, last.conflict = true, true
			}
			if e := endOf(t.End); i == 0 || e.beyond(reach) {
				reach, last = e, t
			}
		}
	}
}

// end is a range's end row; inf for "", the end of the table.
type end struct {
	row string
	inf bool
}

func endOf(row string) end { return end{row, row == ""} }

// after reports whether rows before e include some row ≥ start.
func (e end) after(start string) bool { return e.inf || e.row > start }

func (e end) beyond(o end) bool { return !o.inf && (e.inf || e.row > o.row) }

// spanIndex answers whether any of a set of row ranges overlaps a given
// one in O(log n).
type spanIndex map[string]*tableSpans

type tableSpans struct {
	starts []string // sorted
	reach  []end    // reach[i]: furthest end among the first i+1
}

func newSpanIndex(spans []span) spanIndex {
	slices.SortFunc(spans, func(a, b span) int { return cmp.Or(cmp.Compare(a.table, b.table), cmp.Compare(a.start, b.start)) })
	idx := make(spanIndex)
	for _, s := range spans {
		ts := idx[s.table]
		if ts == nil {
			ts = &tableSpans{}
			idx[s.table] = ts
		}
		r := endOf(s.end)
		if n := len(ts.reach); n > 0 && !r.beyond(ts.reach[n-1]) {
			r = ts.reach[n-1]
		}
		ts.starts = append(ts.starts, s.start)
		ts.reach = append(ts.reach, r)
	}
	return idx
}

// overlaps reports whether some indexed range shares a row with s.
func (idx spanIndex) overlaps(s span) bool {
	ts := idx[s.table]
	if ts == nil {
		return false
	}
	// Ranges starting before s ends...
	n := len(ts.starts)
	if s.end != "" {
		n, _ = slices.BinarySearch(ts.starts, s.end)
	}
	// ...overlap it if one of them ends after it starts.
	return n > 0 && ts.reach[n-1].after(s.start)
}

// recovery says which log a tablet's writes since its redo point are in:
// its last owner's, unless that owner is alive (it unloaded the tablet
// cleanly, or never loaded it).
func (p *planner) recovery(t *tab) (ServerID, bool) {
	if t.LastServer == "" {
		return "", false
	}
	if _, alive := p.liveByID[t.LastServer]; alive {
		return "", false
	}
	d, isDead := p.dead[t.LastServer]
	return t.LastServer, isDead && d.Log == LogSorted
}

func (t *tab) unplaced() bool {
	return t.holder == nil && t.loadTo == nil
}

// assign places unassigned tablets in the paper's order.
func (p *planner) assign() {
	// Tablets per dead server waiting to be recovered decide whether its
	// log is sorted first: those METADATA shows unplaced, or, if more,
	// those the server held when it died (its METADATA tablets dead with
	// it, the rows of its user tablets are not readable yet: the sort
	// starts now, alongside the METADATA tablets' loads, rather than
	// after them).
	waiting := make(map[ServerID]int)
	for id, d := range p.dead {
		waiting[id] = d.Held
	}
	shown := make(map[ServerID]int)
	for _, t := range p.tablets {
		if t.unplaced() && !t.merging {
			if _, ok := p.dead[t.LastServer]; ok {
				shown[t.LastServer]++
			}
		}
	}
	for id, n := range shown {
		waiting[id] = max(waiting[id], n)
	}
	// METADATA tablets to recover, per dead server: two or more are
	// reason enough to sort its log (each would replay all of it, which
	// the sort reads once), even when the master never heard how many
	// tablets the server held (Held 0: a new master) and its user
	// tablets' rows are unreadable with those METADATA tablets down.
	metaWaiting := make(map[ServerID]int)
	for _, t := range p.tablets {
		if t.Kind == Meta && t.unplaced() && !t.merging {
			if _, ok := p.dead[t.LastServer]; ok {
				metaWaiting[t.LastServer]++
			}
		}
	}
	sortFirst := make(map[ServerID]bool)
	deadIDs := make([]ServerID, 0, len(p.dead))
	for id := range p.dead {
		deadIDs = append(deadIDs, id)
	}
	slices.Sort(deadIDs)
	for _, id := range deadIDs {
		if waiting[id] < p.cfg.SortLogMin && metaWaiting[id] < 2 {
			continue
		}
		switch p.dead[id].Log {
		case LogUnsorted:
			sortFirst[id] = true
			p.emit(Action{Kind: SortLog, Server: id, Reason: "dead"})
		case LogSorting:
			sortFirst[id] = true
		}
	}

	rootServed, metaServed := true, true
	for _, t := range p.tablets {
		switch {
		case t.Kind == Root && t.holder == nil:
			rootServed = false
		case t.Kind == Meta && t.holder == nil:
			metaServed = false
		}
	}
	// Two METADATA tablets or more of one dead server wait for its log's
	// sort, for a while: each would replay the whole unsorted log, which
	// the sort reads once.
	metaWaitsForSort := func(dead ServerID) bool {
		return sortFirst[dead] && metaWaiting[dead] >= 2 && p.dead[dead].SortingFor < p.cfg.MetaSortWait
	}
	occ := p.occupied()
	for _, t := range p.tablets {
		if !t.unplaced() || t.merging || t.shadowed || t.acted || len(p.active) == 0 {
			continue
		}
		if t.Kind == Meta && !rootServed || t.Kind == User && !(rootServed && metaServed) {
			continue
		}
		if t.conflict || occ.overlaps(t.span()) {
			p.rescan(t.span(), "split")
			continue
		}
		if sortFirst[t.LastServer] && t.Kind == User || t.Kind == Meta && metaWaitsForSort(t.LastServer) {
			continue
		}
		from, sorted := p.recovery(t)
		reason := "unassigned"
		if from != "" {
			reason = "dead"
		}
		dst := p.bestTarget(t, nil)
		if to, ok := p.liveByID[t.movingTo]; ok && !to.Draining {
			dst = to
			reason = "move"
		}
		t.acted = true
		t.loadTo = dst
		dst.count++
		dst.bytes += t.size
		p.assigned++
		p.emit(Action{Kind: Assign, Tablet: t.ID, Server: dst.ID, RecoverFrom: from, SortedLog: sorted, Reason: reason})
	}
}
