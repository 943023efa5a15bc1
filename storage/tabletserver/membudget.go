package tabletserver

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/tabuladb/tabula/storage/meta"
)

// The server's memtable budget: the memtables of all its tablets
// together, as HBase bounds its region servers' memstores
// (hbase.regionserver.global.memstore.size). Each tablet flushes its own
// memtable at MemtableBytes, but a server with many tablets that all take
// writes would hold that many full memtables; past the budget, the
// largest are flushed early. Writes that outrun the flushes are held back
// once the memtables hold budgetBlockFactor times the budget, until the
// flushes bring them under it again (HBase blocks updates the same way).

// DefaultMemtableBudget is HostOptions.MemtableBudget's default: sixteen
// full memtables of the tablets' default size.
const DefaultMemtableBudget = 1 << 30

// budgetLowWater is the share of the budget the flushes aim to bring the
// memtables under, so that the next few writes do not start another
// round at once (HBase's lower limit, 0.95 there).
const budgetLowWater = 0.9

// budgetBlockFactor times the budget is where writes wait for flushes.
const budgetBlockFactor = 2

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
// (tablet.RequestFlush: in the background, unpaced), and holds writes
// back (writeGate) while the memtables hold budgetBlockFactor times the
// budget; the background loop calls it when writes kick it, at most every
// 50 ms, and every 50 ms while writes are held back.
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
	if h.gate.set(total >= budgetBlockFactor*budget) {
		h.log.Warn("memtables at twice the server's budget: writes wait for flushes", "memtable_bytes", total, "budget", budget)
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

// writeGate holds writes back while the memtables are over
// budgetBlockFactor times the budget. Writes read it without a lock;
// only the background loop (and Close) change it.
type writeGate struct {
	mu sync.Mutex // serializes set
	// shut is nil while writes pass; otherwise its channel is closed
	// when they may pass again.
	shut atomic.Pointer[chan struct{}]
}

// set shuts the gate (true) or opens it (false), and reports whether it
// has just been shut.
func (g *writeGate) set(shut bool) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	cur := g.shut.Load()
	switch {
	case shut && cur == nil:
		ch := make(chan struct{})
		g.shut.Store(&ch)
		return true
	case !shut && cur != nil:
		g.shut.Store(nil)
		close(*cur)
	}
	return false
}

// isShut reports whether writes are being held back.
func (g *writeGate) isShut() bool { return g.shut.Load() != nil }

// admitWrite returns once a write to table id may go on: at once unless
// the memtables are over budgetBlockFactor times the budget; then when the
// flushes brought them under it, or with ctx's error — the write was not
// applied. METADATA's writes are never held back: they are small, and
// assignments, splits and recoveries wait for them.
func (h *Host) admitWrite(ctx context.Context, id meta.TableID) error {
	if id == meta.MetadataTable {
		return nil
	}
	shut := h.gate.shut.Load()
	if shut == nil {
		return nil
	}
	h.metrics.budgetWaits.Inc()
	select {
	case <-*shut:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("write not applied: the server's memtables hold over %d bytes (%d times --memtable-budget) and are still being flushed: %w",
			budgetBlockFactor*h.opts.MemtableBudget, budgetBlockFactor, ctx.Err())
	}
}
