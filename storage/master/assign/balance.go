package assign

import "math"

// means returns the mean tablet count and bytes per active server over the
// tablets placed on live servers (served and not leaving, or loading).
func (p *planner) means() (float64, float64) {
	var c int
	var b int64
	for _, s := range p.live {
		c += s.count
		b += s.bytes
	}
	for _, t := range p.tablets {
		if t.unloading {
			c++ // leaving its server, landing on an active one
			b += t.size
		}
	}
	n := float64(len(p.active))
	return float64(c) / n, float64(b) / n
}

// cost is a server's distance from the mean: the sum of squared relative
// deviations of its tablet count and bytes. Balancing lowers the sum of
// costs; as the cost is convex, a move helps only from a fuller server to
// an emptier one.
func cost(count int, bytes int64, meanC, meanB float64) float64 {
	var f float64
	if meanC > 0 {
		d := float64(count)/meanC - 1
		f += d * d
	}
	if meanB > 0 {
		d := float64(bytes)/meanB - 1
		f += d * d
	}
	return f
}

// inBand reports whether server s is balanced: its tablet count within
// Config.Tolerance of the mean, and its bytes within Tolerance of the mean
// or Config.MinByteSkew of it, whichever is wider — a few megabytes more
// on one server are worth no move (each makes the tablet unavailable for
// a moment, and a master dying between a swap's unloads and loads leaves
// both tablets unserved until the next master), however large they are
// against the mean of a fresh cluster.
func (p *planner) inBand(s *srv, meanC, meanB float64) bool {
	tol := p.cfg.Tolerance
	if meanC > 0 && math.Abs(float64(s.count)/meanC-1) > tol {
		return false
	}
	if meanB > 0 && math.Abs(float64(s.bytes)-meanB) > max(tol*meanB, float64(p.cfg.MinByteSkew)) {
		return false
	}
	return true
}

// bestTarget returns the active server (other than not) where adding t
// raises the cost least, lowest ID on ties.
func (p *planner) bestTarget(t *tab, not *srv) *srv {
	meanC, meanB := p.means()
	if meanC == 0 {
		meanC = 1
	}
	var best *srv
	var bestDelta float64
	for _, s := range p.active {
		if s == not {
			continue
		}
		d := cost(s.count+1, s.bytes+t.size, meanC, meanB) - cost(s.count, s.bytes, meanC, meanB)
		if best == nil || d < bestDelta-1e-12 {
			best, bestDelta = s, d
		}
	}
	return best
}

// movable reports whether a tablet may be unloaded for a move this round.
func (t *tab) movable(allowSplitting bool) bool {
	return !t.acted && !t.unloading && !t.merging && !t.shadowed && !t.conflict && (allowSplitting || !t.splitting)
}

// settling reports whether t's holder loaded it less than
// Config.SettleAfterLoad ago: balance leaves it there for now.
func (p *planner) settling(t *tab) bool {
	return t.loadedOn != nil && t.loadedOn == t.holder && t.loadedAgo < p.cfg.SettleAfterLoad
}

func (p *planner) movesLeft() int {
	n := p.cfg.MaxMoves - p.moved
	for _, t := range p.tablets {
		if t.unloading {
			n--
		}
	}
	return n
}

func (p *planner) move(t *tab, from, to *srv, reason string) {
	t.acted = true
	p.moved++
	from.count--
	from.bytes -= t.size
	if to != nil {
		to.count++
		to.bytes += t.size
	}
	var toID ServerID
	if to != nil {
		toID = to.ID
	}
	p.emit(Action{Kind: Unassign, Tablet: t.ID, Server: from.ID, To: toID, Reason: reason})
}

// drain unloads the tablets of draining servers, except those splitting
// (their children move once the split is done), within the move budget.
func (p *planner) drain() {
	if len(p.active) == 0 {
		return
	}
	budget := p.movesLeft()
	for _, s := range p.live {
		if !s.Draining {
			continue
		}
		for _, t := range s.held {
			if budget <= 0 {
				return
			}
			if !t.movable(false) {
				continue
			}
			to := p.bestTarget(t, s)
			// The tablet leaves s now; its bytes land on to only in plan.
			p.move(t, s, to, "drain")
			budget--
		}
	}
}

// balance moves tablets from fuller to emptier active servers while some
// server is outside the tolerance band and a move lowers the total cost,
// within the move budget; when no single move helps, it swaps two tablets.
// Splitting tablets move only when nothing else can, and are never
// swapped; tablets still settling after their load (Config.SettleAfterLoad)
// do not move. It does nothing in a round that assigns tablets: assignment
// already fills the emptiest servers. Loads in flight count on their
// targets.
func (p *planner) balance() {
	if len(p.active) < 2 || p.cfg.NoBalance {
		return
	}
	if p.assigned > 0 {
		return
	}
	budget := p.movesLeft()
	for ; budget > 0; budget-- {
		meanC, meanB := p.means()
		balanced := true
		for _, s := range p.active {
			if !p.inBand(s, meanC, meanB) {
				balanced = false
				break
			}
		}
		if balanced {
			return
		}
		t, from, to := p.bestMove(meanC, meanB, false)
		if t == nil {
			t, from, to = p.bestMove(meanC, meanB, true)
		}
		if t != nil {
			p.move(t, from, to, "balance")
			continue
		}
		// No single move helps: counts are even but bytes are not. Trade a
		// small tablet for a big one (two moves).
		if budget < 2 {
			return
		}
		a, b, sa, sb := p.bestSwap(meanC, meanB)
		if a == nil {
			return
		}
		p.move(a, sa, sb, "swap")
		p.move(b, sb, sa, "swap")
		budget--
	}
}

// bestSwap returns the exchange of a tablet of an out-of-band server with
// one of another server that lowers the total cost most, by at least a
// hundredth of the tablets' weight; nil if none does. Splitting and
// settling tablets are not swapped.
func (p *planner) bestSwap(meanC, meanB float64) (*tab, *tab, *srv, *srv) {
	var ba, bb *tab
	var bsa, bsb *srv
	var best float64
	for i, sa := range p.active {
		for _, sb := range p.active[i+1:] {
			if p.inBand(sa, meanC, meanB) && p.inBand(sb, meanC, meanB) {
				continue
			}
			base := cost(sa.count, sa.bytes, meanC, meanB) + cost(sb.count, sb.bytes, meanC, meanB)
			for _, a := range sa.held {
				if !a.movable(false) || a.Kind != User || p.settling(a) {
					continue
				}
				for _, b := range sb.held {
					if !b.movable(false) || b.Kind != User || p.settling(b) || a.size == b.size {
						continue
					}
					d := cost(sa.count, sa.bytes-a.size+b.size, meanC, meanB) +
						cost(sb.count, sb.bytes-b.size+a.size, meanC, meanB) - base
					limit := -(weight(a.size, meanC, meanB) + weight(b.size, meanC, meanB)) / 100
					if d < limit && d < best {
						best, ba, bb, bsa, bsb = d, a, b, sa, sb
					}
				}
			}
		}
	}
	return ba, bb, bsa, bsb
}

// bestMove returns the single move that lowers the total cost most, where
// the source or the destination is out of band; nil if none lowers it by
// at least a hundredth of the tablet's own weight (its cost on an empty
// server at the mean), which keeps tablets from moving for no visible
// gain.
func (p *planner) bestMove(meanC, meanB float64, allowSplitting bool) (*tab, *srv, *srv) {
	var bt *tab
	var bf, bd *srv
	var best float64
	for _, from := range p.active {
		fromIn := p.inBand(from, meanC, meanB)
		base := cost(from.count, from.bytes, meanC, meanB)
		for _, t := range from.held {
			// METADATA tablets are not moved for balance: every move
			// makes every client walk the hierarchy again, and the
			// master's own reads of METADATA wait for it.
			if !t.movable(allowSplitting) || t.Kind != User || p.settling(t) {
				continue
			}
			fromAfter := cost(from.count-1, from.bytes-t.size, meanC, meanB) - base
			limit := -weight(t.size, meanC, meanB) / 100
			for _, to := range p.active {
				if to == from || fromIn && p.inBand(to, meanC, meanB) {
					continue
				}
				d := fromAfter + cost(to.count+1, to.bytes+t.size, meanC, meanB) - cost(to.count, to.bytes, meanC, meanB)
				if d < limit && d < best {
					best, bt, bf, bd = d, t, from, to
				}
			}
		}
	}
	return bt, bf, bd
}

// merge carries out the merges requested (whatever the tablets' sizes),
// then proposes merges of small adjacent user tablets of one table, both
// served and settled, within the budget of merges under way.
func (p *planner) merge(underway int, requests []MergeUnderway) {
	budget := p.cfg.MaxMerges - underway
	settled := func(t *tab) bool {
		return t.Kind == User && t.holder != nil && !t.acted && !t.unloading && !t.splitting &&
			!t.merging && !t.shadowed && !t.conflict
	}
	for _, r := range requests {
		if budget <= 0 {
			return
		}
		a, okA := p.byID[r.Left]
		b, okB := p.byID[r.Right]
		if !okA || !okB || a.Table != b.Table || a.End == "" || a.End != b.Start || !settled(a) || !settled(b) {
			continue
		}
		a.acted, b.acted = true, true
		budget--
		p.emit(Action{Kind: Merge, Table: a.Table, Tablet: a.ID, Right: b.ID, Reason: "requested"})
	}
	if p.cfg.NoMerge {
		return
	}
	small := func(t *tab) bool { return settled(t) && !t.shares && t.size < p.cfg.MergeBelow }
	for i := 0; i+1 < len(p.tablets) && budget > 0; i++ {
		a, b := p.tablets[i], p.tablets[i+1]
		// Half the split size at most, so that a merged tablet does not
		// split again at once.
		if a.Table != b.Table || a.End == "" || a.End != b.Start || !small(a) || !small(b) ||
			a.size+b.size >= p.cfg.SplitSize/2 {
			continue
		}
		a.acted, b.acted = true, true
		budget--
		p.emit(Action{Kind: Merge, Table: a.Table, Tablet: a.ID, Right: b.ID, Reason: "small"})
		i++
	}
}

// weight is how much one tablet of the given size weighs in cost: the
// squares of its share of the mean count and bytes.
func weight(size int64, meanC, meanB float64) float64 {
	var w float64
	if meanC > 0 {
		w += 1 / (meanC * meanC)
	}
	if meanB > 0 {
		f := float64(size) / meanB
		w += f * f
	}
	return w
}
