package tabletserver

import (
	"cmp"
	"slices"
)

// The server's memtable budget: the memtables of all its tablets
// together, as HBase bounds its region servers' memstores
// (hbase.regionserver.global.memstore.size). Each tablet flushes its own
// memtable at MemtableBytes, but a server with many tablets that all take
// writes would hold that many full memtables; past the budget, the
// largest are flushed early.

// DefaultMemtableBudget is HostOptions.MemtableBudget's default: sixteen
// full memtables of the tablets' default size.
const DefaultMemtableBudget = 1 << 30

// budgetLowWater is the share of the budget the flushes aim to bring the
// memtables under, so that the next few writes do not start another
// round at once (HBase's lower limit, 0.95 there).
const budgetLowWater = 0.9

// memtableUse is one tablet's memtables as the budget sees them: the
// active one and the one being flushed (whose memory the flush frees).
type memtableUse struct {
	active, frozen int64
}

// budgetFlushes returns the indexes of the tablets whose active memtables
// to flush, largest first: none while all memtables together stay within
// budget (or budget <= 0: none); otherwise enough of them that what
// remains once these flushes and those under way are done is at most
// budgetLowWater of the budget, or every candidate. A tablet already
// flushing is no candidate (a tablet flushes one memtable at a time, and
// its frozen one is already counted as freed), nor is an empty one.
func budgetFlushes(uses []memtableUse, budget int64) []int {
	if budget <= 0 {
		return nil
	}
	var total, flushing int64
	for _, u := range uses {
		total += u.active + u.frozen
		flushing += u.frozen
	}
	if total <= budget {
		return nil
	}
	low := int64(float64(budget) * budgetLowWater)
	remains := total - flushing
	var candidates []int
	for i, u := range uses {
		if u.frozen == 0 && u.active > 0 {
			candidates = append(candidates, i)
		}
	}
	slices.SortStableFunc(candidates, func(a, b int) int { return cmp.Compare(uses[b].active, uses[a].active) })
	var out []int
	for _, i := range candidates {
		if remains <= low {
			break
		}
		out = append(out, i)
		remains -= uses[i].active
	}
	return out
}

// enforceMemtableBudget asks the tablets budgetFlushes picks to flush
// (tablet.RequestFlush: in the background, unpaced); the background loop
// calls it when writes kick it, at most every 50 ms.
func (h *Host) enforceMemtableBudget() {
	budget := h.opts.MemtableBudget
	if budget <= 0 {
		return
	}
	tabs := h.openTablets()
	uses := make([]memtableUse, len(tabs))
	var total int64
	for i, tb := range tabs {
		a, f := tb.MemtableBytes()
		uses[i] = memtableUse{active: a, frozen: f}
		total += a + f
	}
	picked := budgetFlushes(uses, budget)
	if len(picked) == 0 {
		return
	}
	var bytes int64
	for _, i := range picked {
		tabs[i].RequestFlush()
		bytes += uses[i].active
	}
	h.metrics.budgetFlushes.Add(float64(len(picked)))
	h.log.Info("memtables past the server's budget: flushing the largest", "memtable_bytes", total, "budget", budget, "tablets", len(picked), "flushed_bytes", bytes)
}
