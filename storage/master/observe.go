package master

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/tabuladb/tabula/storage/coord"
	"github.com/tabuladb/tabula/storage/master/assign"
)

// This file is the master's observation without I/O: what a round gathered
// (roundView) and what the term remembers (memory) in, the State to plan on
// out — the decisions about released servers, stale reports and skipped
// rounds, testable without servers like assign.Plan.

// roundView is what one round of the assignment loop gathered by I/O.
type roundView struct {
	// Tablets are METADATA's.
	Tablets []assign.Tablet
	// Whole says Tablets is every row of METADATA: no METADATA tablet was
	// left unread (moving, at a dead server). Only then can a tablet a
	// server reports and Tablets lacks be an orphan.
	Whole bool
	// Partial says Tablets is known to lack the rows of a METADATA tablet
	// left unread (Whole unset by a reader that tells, WholeReader): a
	// tablet Tablets lacks may exist, and a dead server's other tablets
	// may still wait.
	Partial bool
	// Keys is the picture of servers/, by key; an Entry without a
	// Session is a released key.
	Keys map[string]coord.Entry
	// Lists holds the List answer of each server asked (toList).
	Lists map[assign.ServerID]listAnswer
	// Asked is the time the Lists were sent: a server whose List failed
	// has answered none since then. Zero: Now.
	Asked time.Time
	// Now is the time the answers were in.
	Now time.Time
}

// listAnswer is a server's answer to List: what it serves, or an error.
type listAnswer struct {
	Served []assign.Served
	Err    error
}

// toList returns the servers a round asks what they serve: those with a
// key held by a session and not declared dead, in key order.
func (v roundView) toList(dead map[assign.ServerID]assign.LogState) []assign.ServerID {
	var out []assign.ServerID
	for _, key := range slices.Sorted(maps.Keys(v.Keys)) {
		sid, ok := coord.ServerID(key)
		if !ok || v.Keys[key].Session == "" {
			continue
		}
		if _, isDead := dead[assign.ServerID(sid)]; isDead {
			continue
		}
		out = append(out, assign.ServerID(sid))
	}
	return out
}

// memory is what a term carries from one observation to the next.
type memory struct {
	// reports is the last List answer of each server.
	reports map[assign.ServerID][]assign.Served
	// dead holds the servers this master declared dead (it held their
	// locks and deleted their keys), until none of their tablets needs
	// recovering.
	dead map[assign.ServerID]assign.LogState
	// held holds, for each server in dead, how many tablets its last
	// report listed when it was declared dead (assign.DeadServer.Held).
	held map[assign.ServerID]int
	// sortStarted holds, for each server in dead whose log sort was
	// started, when (assign.DeadServer.SortingFor).
	sortStarted map[assign.ServerID]time.Time
	// inflight holds one request per tablet, kept as the assign package
	// doc says.
	inflight map[assign.TabletID]*request
	// unreachable holds the servers whose List has been failing, since
	// when and how many times in a row.
	unreachable map[assign.ServerID]*failing
	// unknown holds the tablets servers report and METADATA lacks, since
	// when each has been so in every round with METADATA read whole
	// (orphans).
	unknown map[assign.Orphan]*unknownSince
	// landed holds, for tablets whose load this master saw confirmed in
	// the last landedKept, the server and when (assign.Served.LoadedAgo).
	landed map[assign.TabletID]landing
}

// landing is a load the master saw confirmed: server first reported the
// tablet in the round observed at time at.
type landing struct {
	server assign.ServerID
	at     time.Time
}

// landedKept is how long memory.landed keeps a confirmed load: beyond
// any assign.Config.SettleAfterLoad worth setting.
const landedKept = 10 * time.Minute

// unknownSince is when a tablet was first seen served and lacking from
// METADATA read whole, and when it was last given to the planner as an
// orphan (zero: never).
type unknownSince struct {
	first, given time.Time
}

func newMemory() memory {
	return memory{
		reports:     make(map[assign.ServerID][]assign.Served),
		dead:        make(map[assign.ServerID]assign.LogState),
		held:        make(map[assign.ServerID]int),
		sortStarted: make(map[assign.ServerID]time.Time),
		inflight:    make(map[assign.TabletID]*request),
		unreachable: make(map[assign.ServerID]*failing),
		unknown:     make(map[assign.Orphan]*unknownSince),
		landed:      make(map[assign.TabletID]landing),
	}
}

// failing records a server whose List keeps failing.
type failing struct {
	key string
	// since is when the first of the failed Lists was sent: the server
	// has answered nothing since (a List that times out failed at its
	// deadline, ListTimeout later).
	since time.Time
	count int
	// gone counts the latest failures in a row that said the server is
	// gone (ErrServerGone), the first of them at goneSince.
	gone      int
	goneSince time.Time
}

// note records a failure of the server's List at now; gone says it wraps
// ErrServerGone.
func (f *failing) note(now time.Time, gone bool) {
	f.count++
	switch {
	case !gone:
		f.gone = 0
	case f.gone == 0:
		f.gone, f.goneSince = 1, now
	default:
		f.gone++
	}
}

// due reports whether the master should end the failing server's session
// now: after at least three failures over unreachableAfter, or after
// three in a row over goneAfter that said the server is gone (nothing
// listens at its address, or another process answers there) — a surer
// sign than silence, which a server slow under load also gives. Only the
// latest run counts: a server killed and started again on its address
// fails first by silence or a refused connection while the new process
// starts, then by answering as that process.
func (f *failing) due(now time.Time, unreachableAfter, goneAfter time.Duration) bool {
	if f.count >= 3 && now.Sub(f.since) >= unreachableAfter {
		return true
	}
	return f.gone >= 3 && now.Sub(f.goneSince) >= min(goneAfter, unreachableAfter)
}

// request is a load or unload in flight and when it was sent.
type request struct {
	assign.InFlight
	sent time.Time
	// loaded says the target answered the load (it served the tablet when
	// the call returned: term.noteLoaded). A List asked after that which
	// does not show the tablet means it left the server since — unloaded
	// by an operator, or closed by the server — and the record goes
	// (settle): waiting Config.LoadTimeout for a confirmation that cannot
	// come would leave the tablet unserved that long.
	loaded bool
	// failures counts the calls of this load or unload, to this server,
	// that failed in a row (term.noteFailed backs off by it).
	failures int
}

// observation is buildState's result.
type observation struct {
	// State is the picture to plan on (without Splits, which the caller
	// adds); meaningless when Skip is set.
	State assign.State
	// Released holds the servers whose key is released but not yet the
	// master's: they keep their tablets and are sent nothing.
	Released map[assign.ServerID]bool
	// Answered counts the servers that answered List.
	Answered int
	// Skip, when set, says why no plan may be made this round: a server
	// that never reported did not answer, so its tablets would look
	// unserved and be assigned twice.
	Skip error
}

// buildState makes the round's State from what it gathered and updates m:
//   - a server whose key is released but not yet the master's may still
//     serve until its lease runs out: it is kept Draining with its last
//     report plus the tablets METADATA places on it;
//   - a server that does not answer keeps its last report (with the
//     requests in flight a safe picture: nothing it served is given away)
//     and is counted unreachable; one that never reported skips the round;
//   - on a round not skipped: reports of servers gone are forgotten, loads
//     the target reports are confirmed, requests for tablets METADATA
//     dropped go, and dead servers with nothing left to recover are
//     forgotten.
func buildState(v roundView, m *memory, orphanAfter time.Duration) observation {
	o := observation{Released: make(map[assign.ServerID]bool)}
	st := &o.State
	st.Tablets = v.Tablets
	present := make(map[assign.ServerID]bool)
	answered := make(map[assign.ServerID]bool) // List answered this round
	for _, key := range slices.Sorted(maps.Keys(v.Keys)) {
		e := v.Keys[key]
		sid, ok := coord.ServerID(key)
		if !ok {
			continue
		}
		id := assign.ServerID(sid)
		if _, isDead := m.dead[id]; isDead {
			continue
		}
		present[id] = true
		srv := assign.Server{ID: id, Addr: coord.ParseServerRecord(e.Value).Addr}
		if e.Session == "" {
			o.Released[id] = true
			delete(m.unreachable, id)
			// Released but not yet ours (lock-delay, or the wait after
			// the master ended its session): Draining keeps new tablets
			// off it, and unloads to it are not sent.
			srv.Draining = true
			srv.Serving = slices.Clone(m.reports[id])
			for _, tb := range v.Tablets {
				if tb.LastServer == id && !slices.ContainsFunc(srv.Serving, func(s assign.Served) bool { return s.ID == tb.ID }) {
					srv.Serving = append(srv.Serving, assign.Served{ID: tb.ID, Table: tb.Table, Start: tb.Start, End: tb.End})
				}
			}
			st.Live = append(st.Live, srv)
			continue
		}
		a, asked := v.Lists[id]
		if !asked {
			a.Err = errors.New("not asked")
		}
		served := a.Served
		if a.Err != nil {
			f := m.unreachable[id]
			if f == nil {
				since := v.Asked
				if since.IsZero() {
					since = v.Now
				}
				f = &failing{key: key, since: since}
				m.unreachable[id] = f
			}
			f.note(v.Now, errors.Is(a.Err, ErrServerGone))
			prev, known := m.reports[id]
			if !known {
				o.Skip = fmt.Errorf("master: list %s: %w", sid, a.Err)
				continue
			}
			served = prev
		} else {
			o.Answered++
			answered[id] = true
			delete(m.unreachable, id)
		}
		m.reports[id] = served
		srv.Serving = served
		st.Live = append(st.Live, srv)
	}
	for id := range m.unreachable {
		if !present[id] {
			delete(m.unreachable, id)
		}
	}
	if o.Skip != nil {
		return o
	}
	for id := range m.reports {
		if !present[id] {
			delete(m.reports, id)
		}
	}
	m.settle(*st, answered, !v.Partial, v.Now)
	m.noteLanded(st.Live, answered, v.Now)
	st.Orphans = m.orphans(*st, v, answered, orphanAfter)
	for _, id := range slices.Sorted(maps.Keys(m.dead)) {
		d := assign.DeadServer{ID: id, Log: m.dead[id], Held: m.held[id]}
		if started, ok := m.sortStarted[id]; ok && d.Log == assign.LogSorting {
			d.SortingFor = v.Now.Sub(started)
		}
		st.Dead = append(st.Dead, d)
	}
	for _, id := range slices.Sorted(maps.Keys(m.inflight)) {
		in := m.inflight[id].InFlight
		in.Age = v.Now.Sub(m.inflight[id].sent)
		st.InFlight = append(st.InFlight, in)
	}
	return o
}

// orphans returns the tablets to unload as orphans (assign.State's
// Orphans): those the servers that answered this round report, METADATA
// lacks, and that have lacked it in every round since at least after
// ago with METADATA read whole — far longer than a split takes to reach
// METADATA, by its server's commit or the master's repair. Each is given
// again every after while it stays (its unload failed or was lost). A
// round that could not read all of METADATA (v.Whole unset) forgets them
// all: their time starts again once it can. after <= 0 finds none.
func (m *memory) orphans(st assign.State, v roundView, answered map[assign.ServerID]bool, after time.Duration) []assign.Orphan {
	if after <= 0 || !v.Whole {
		clear(m.unknown)
		return nil
	}
	known := make(map[assign.TabletID]bool, len(st.Tablets))
	for _, tb := range st.Tablets {
		known[tb.ID] = true
	}
	seen := make(map[assign.Orphan]bool)
	var out []assign.Orphan
	for _, srv := range st.Live {
		if !answered[srv.ID] {
			continue
		}
		for _, sv := range srv.Serving {
			if known[sv.ID] {
				continue
			}
			o := assign.Orphan{Server: srv.ID, Tablet: sv.ID}
			seen[o] = true
			u := m.unknown[o]
			if u == nil {
				u = &unknownSince{first: v.Now}
				m.unknown[o] = u
			}
			if v.Now.Sub(u.first) >= after && (u.given.IsZero() || v.Now.Sub(u.given) >= after) {
				u.given = v.Now
				out = append(out, o)
			}
		}
	}
	for o := range m.unknown {
		if !seen[o] && answered[o.Server] {
			delete(m.unknown, o)
		}
	}
	for o := range m.unknown {
		if !slices.ContainsFunc(st.Live, func(s assign.Server) bool { return s.ID == o.Server }) {
			delete(m.unknown, o) // its server is gone
		}
	}
	slices.SortFunc(out, func(a, b assign.Orphan) int {
		return cmp.Or(cmp.Compare(a.Server, b.Server), cmp.Compare(a.Tablet, b.Tablet))
	})
	return out
}

// settle updates m from a fresh observation: loads the target reports are
// confirmed (and remembered in landed as of now), loads the target answered but no longer reports (answered:
// the servers whose List answered this round, asked after the load's
// answer was noted) are over, and — only from METADATA read whole (whole),
// since rows not read are not rows dropped — records of tablets METADATA
// dropped go and dead servers with nothing left to recover are forgotten.
// (A dead server that held the root and METADATA tablets was forgotten
// as soon as the root was back, before the other METADATA tablets' rows
// could be read: they, and its user tablets, were then recovered without
// the log sort, each replaying the whole log.)
func (m *memory) settle(st assign.State, answered map[assign.ServerID]bool, whole bool, now time.Time) {
	byID := make(map[assign.TabletID]bool, len(st.Tablets))
	for _, tb := range st.Tablets {
		byID[tb.ID] = true
	}
	servedBy := make(map[assign.TabletID][]assign.ServerID)
	for _, s := range st.Live {
		for _, sv := range s.Serving {
			servedBy[sv.ID] = append(servedBy[sv.ID], s.ID)
		}
	}
	for id, r := range m.inflight {
		if !byID[id] {
			if whole {
				delete(m.inflight, id)
			}
			continue
		}
		if r.Kind != assign.LoadRequest {
			continue
		}
		switch {
		case slices.Contains(servedBy[id], r.Server):
			delete(m.inflight, id) // confirmed
			m.landed[id] = landing{server: r.Server, at: now}
		case r.loaded && answered[r.Server]:
			// Loaded, then gone from the server before this List: the
			// tablet is unserved now, and planned as any other.
			delete(m.inflight, id)
		}
	}
	for id := range m.dead {
		if !whole {
			break
		}
		needed := slices.ContainsFunc(st.Tablets, func(tb assign.Tablet) bool {
			return tb.LastServer == id && len(servedBy[tb.ID]) == 0
		})
		if !needed {
			delete(m.dead, id)
			delete(m.held, id)
			delete(m.sortStarted, id)
		}
	}
}

// noteLanded sets Served.LoadedAgo on the live servers' reports of the
// tablets whose loads m.landed holds, and forgets the loads confirmed
// more than landedKept ago and those of tablets a server that answered
// this round no longer reports (moved, unloaded, split or merged since)
// or whose server is gone. It copies the reports it annotates: m.reports
// keeps the servers' own words.
func (m *memory) noteLanded(live []assign.Server, answered map[assign.ServerID]bool, now time.Time) {
	byServer := make(map[assign.ServerID]int, len(live))
	copied := make(map[assign.ServerID]bool)
	for i, s := range live {
		byServer[s.ID] = i
	}
	for id, l := range m.landed {
		i, ok := byServer[l.server]
		if !ok || now.Sub(l.at) > landedKept {
			delete(m.landed, id)
			continue
		}
		s := &live[i]
		j := slices.IndexFunc(s.Serving, func(sv assign.Served) bool { return sv.ID == id })
		if j < 0 {
			if answered[s.ID] {
				delete(m.landed, id)
			}
			continue
		}
		if !copied[s.ID] {
			s.Serving = slices.Clone(s.Serving)
			copied[s.ID] = true
		}
		// At least a nanosecond: 0 means no load remembered.
		s.Serving[j].LoadedAgo = max(now.Sub(l.at), time.Nanosecond)
	}
}

// pendingSplits returns the split reports METADATA does not reflect yet:
// those whose parent is still listed or some child is not. A report whose
// parent has been gone for more than splitReportRounds reads (gone counts
// them, by parent) is dropped although a child is missing: the parent's
// row goes only with the commit's last step, so the split is in METADATA
// and the child split again (or merged) before the master read it — as
// METADATA tablets do, one split right after another while they fill up.
// Kept, such a report would have the planner read the table's range again
// every round for ever. (If the parent was only missing from an
// incomplete read and comes back unsplit, the children its server reports
// hold it back all the same: assign.Plan's unknown tablets.)
func pendingSplits(splits []assign.Split, tablets []assign.Tablet, gone map[assign.TabletID]int) []assign.Split {
	byID := make(map[assign.TabletID]bool, len(tablets))
	for _, tb := range tablets {
		byID[tb.ID] = true
	}
	out := slices.DeleteFunc(splits, func(s assign.Split) bool {
		if byID[s.Parent] {
			delete(gone, s.Parent)
			return false
		}
		for _, ch := range s.Children {
			if !byID[ch] {
				gone[s.Parent]++
				return gone[s.Parent] > splitReportRounds
			}
		}
		return true
	})
	pending := make(map[assign.TabletID]bool, len(out))
	for _, s := range out {
		pending[s.Parent] = true
	}
	for id := range gone {
		if !pending[id] {
			delete(gone, id)
		}
	}
	return out
}

// splitReportRounds is how many METADATA reads a split report may find
// its parent gone and a child missing before it is dropped.
const splitReportRounds = 3
