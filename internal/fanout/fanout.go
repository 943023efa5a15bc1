// Package fanout is the group-by-destination step of every request that
// fans out: the entries of a bulk write grouped by the tablet, the server
// or the tablet's location they go to, each group sent as one request, the
// groups concurrently, and each outcome put back at its entry's index.
// Tablet servers apply a MutateRows one tablet at a time
// (storage/tabletserver), the gateway forwards it one server at a time, the
// Go client sends a bulk write one tablet's location at a time
// (storage/client): all three group here.
//
// The package is plain logic over indexes (no I/O, no storage types), so
// that the client can use it without linking the engine. Indexes refer to
// the caller's slice of entries; a Batch never holds the entries
// themselves.
package fanout

import "sync"

// Batch is one destination's share of the entries: their indexes in the
// order they were added, and their sizes added up.
type Batch[D comparable] struct {
	Dest D
	Idx  []int
	// Bytes and Count are the sums of what Add was given: the entries'
	// size in bytes and a count of theirs that a request bounds (the
	// client's mutations).
	Bytes, Count int
}

// Limits bound one Batch; a zero field is no bound.
type Limits struct {
	// Entries: a batch is sent once it holds this many entries.
	Entries int
	// Bytes: a batch is sent once its entries' bytes reach this.
	Bytes int
	// Count: a batch is sent once its count reaches this, and an entry
	// whose count would carry the pending batch past it is sent in the
	// next batch (alone if its own count passes the limit: the
	// destination refuses it for itself, not its neighbours).
	Count int
}

// Batcher groups entries by destination as they are added and hands each
// destination's batch to send once it reaches a limit; Flush sends the
// rest. A Batcher is used by one goroutine; send is called on it, and
// must not keep the Batcher.
type Batcher[D comparable] struct {
	limits  Limits
	send    func(*Batch[D])
	pending map[D]*Batch[D]
	order   []*Batch[D] // batches in the order of their first entry; those sent are skipped
}

// NewBatcher returns a Batcher that calls send with each full batch.
func NewBatcher[D comparable](limits Limits, send func(*Batch[D])) *Batcher[D] {
	return &Batcher[D]{limits: limits, send: send, pending: make(map[D]*Batch[D])}
}

// Add adds entry i, of bytes and count, to dest's pending batch, sending
// that batch first if i's count would carry it past Limits.Count, and
// after if it reached a limit.
func (b *Batcher[D]) Add(dest D, i, bytes, count int) {
	p := b.pending[dest]
	if p != nil && b.limits.Count > 0 && p.Count+count > b.limits.Count {
		b.sendPending(dest, p)
		p = nil
	}
	if p == nil {
		p = &Batch[D]{Dest: dest}
		b.pending[dest] = p
		b.order = append(b.order, p)
	}
	p.Idx = append(p.Idx, i)
	p.Bytes += bytes
	p.Count += count
	l := b.limits
	if l.Entries > 0 && len(p.Idx) >= l.Entries || l.Bytes > 0 && p.Bytes >= l.Bytes || l.Count > 0 && p.Count >= l.Count {
		b.sendPending(dest, p)
	}
}

func (b *Batcher[D]) sendPending(dest D, p *Batch[D]) {
	delete(b.pending, dest)
	b.send(p)
}

// Flush sends every pending batch, in the order their first entries were
// added.
func (b *Batcher[D]) Flush() {
	order := b.order
	b.order = nil
	for _, p := range order {
		if b.pending[p.Dest] == p {
			b.sendPending(p.Dest, p)
		}
	}
}

// Group groups the entries idx, in that order, by dest(i): the batches in
// the order of their first entry, each entry's index in the order of idx.
// Entries for which dest reports false have no destination and are
// returned in rest, in the order of idx.
func Group[D comparable](idx []int, dest func(i int) (D, bool)) (batches []*Batch[D], rest []int) {
	g := NewBatcher(Limits{}, func(p *Batch[D]) { batches = append(batches, p) })
	for _, i := range idx {
		d, ok := dest(i)
		if !ok {
			rest = append(rest, i)
			continue
		}
		g.Add(d, i, 0, 0)
	}
	g.Flush()
	return batches, rest
}

// Each calls fn for every batch, concurrently, and returns once all have
// returned. fn writes each entry's outcome at its index: the indexes of
// distinct batches of one Group are distinct, so no two calls write the
// same one.
func Each[D comparable](batches []*Batch[D], fn func(*Batch[D])) {
	if len(batches) == 1 {
		fn(batches[0])
		return
	}
	var wg sync.WaitGroup
	for _, b := range batches {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn(b)
		}()
	}
	wg.Wait()
}

// Seq returns the indexes 0, 1, ..., n-1: every entry of a request.
func Seq(n int) []int {
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	return idx
}
