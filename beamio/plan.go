package beamio

import (
	"bytes"
	"math"

	"github.com/tabuladb/tabula/beamio/keyrange"
)

// Tablet is one tablet's rows [Start, End) (empty End: the end of the
// table), as client.Tablets lists them.
type Tablet struct {
	Start, End []byte
}

// Sample is one SampleRowKeys answer: rows before Key hold about Offset
// bytes of the table; the empty Key is the end of the table.
type Sample struct {
	Key    []byte
	Offset int64
}

// PlanSplits returns the initial restrictions of a read of ranges (in key
// order, not overlapping) over a table with the given tablets and
// samples: one per tablet a range overlaps, cut further at sample keys
// and, within a stretch between samples, at interpolated keys, so that
// each holds about target bytes (target <= 0: one per tablet). Each
// restriction's Bytes is its estimated size: the samples' bytes, spread
// evenly by key position between samples. Restrictions are in key order
// and cover exactly the parts of ranges inside the tablets' span.
func PlanSplits(ranges []keyrange.Restriction, tablets []Tablet, samples []Sample, target int64) []keyrange.Restriction {
	segs := segments(samples)
	var out []keyrange.Restriction
	for _, r := range ranges {
		for _, t := range tablets {
			piece, ok := intersect(r, keyrange.Restriction{Start: t.Start, End: t.End})
			if !ok {
				continue
			}
			out = append(out, cutToSize(piece, segs, target)...)
		}
	}
	return out
}

// segment is the stretch of keys between two samples and its bytes.
type segment struct {
	r     keyrange.Restriction
	bytes int64
}

// segments turns cumulative samples into stretches [previous key, key).
func segments(samples []Sample) []segment {
	var out []segment
	var prevKey []byte
	var prevOff int64
	for _, s := range samples {
		seg := segment{r: keyrange.Restriction{Start: prevKey, End: s.Key}, bytes: max(s.Offset-prevOff, 0)}
		if !seg.r.Empty() {
			out = append(out, seg)
		}
		if len(s.Key) == 0 {
			break
		}
		prevKey, prevOff = s.Key, s.Offset
	}
	return out
}

// intersect returns a ∩ b, false when it is empty.
func intersect(a, b keyrange.Restriction) (keyrange.Restriction, bool) {
	out := keyrange.Restriction{Start: a.Start, End: a.End}
	if bytes.Compare(b.Start, out.Start) > 0 {
		out.Start = b.Start
	}
	if !b.Unbounded() && (out.Unbounded() || bytes.Compare(b.End, out.End) < 0) {
		out.End = b.End
	}
	return out, !out.Empty()
}

// estimate returns the bytes of r: each segment's bytes times the share
// of the segment (by key position) r covers.
func estimate(r keyrange.Restriction, segs []segment) int64 {
	var total float64
	for _, s := range segs {
		in, ok := intersect(r, s.r)
		if !ok || s.bytes == 0 {
			continue
		}
		lo := keyrange.Position(s.r.Start, s.r.End, in.Start)
		hi := 1.0
		if !in.Unbounded() {
			hi = keyrange.Position(s.r.Start, s.r.End, in.End)
		}
		total += float64(s.bytes) * max(hi-lo, 0)
	}
	return int64(math.Round(total))
}

// cutToSize cuts piece at the sample keys inside it into stretches,
// joins neighbouring stretches while they fit in target, and divides a
// stretch larger than target evenly at interpolated keys.
func cutToSize(piece keyrange.Restriction, segs []segment, target int64) []keyrange.Restriction {
	piece.Bytes = estimate(piece, segs)
	if target <= 0 || piece.Bytes <= target {
		return []keyrange.Restriction{piece}
	}
	// Stretches between the sample keys inside the piece.
	var cuts [][]byte
	for _, s := range segs {
		if len(s.r.End) > 0 && bytes.Compare(s.r.End, piece.Start) > 0 && (piece.Unbounded() || bytes.Compare(s.r.End, piece.End) < 0) {
			cuts = append(cuts, s.r.End)
		}
	}
	var stretches []keyrange.Restriction
	start := piece.Start
	for _, c := range append(cuts, piece.End) {
		st := keyrange.Restriction{Start: start, End: c}
		st.Bytes = estimate(st, segs)
		stretches = append(stretches, st)
		start = c
	}
	var out []keyrange.Restriction
	var cur *keyrange.Restriction
	flush := func() {
		if cur != nil {
			out = append(out, *cur)
			cur = nil
		}
	}
	for _, st := range stretches {
		if st.Bytes > target {
			flush()
			out = append(out, divide(st, target)...)
			continue
		}
		if cur != nil && cur.Bytes+st.Bytes > target {
			flush()
		}
		if cur == nil {
			c := st
			cur = &c
			continue
		}
		cur.End, cur.Bytes = st.End, cur.Bytes+st.Bytes
	}
	flush()
	return out
}

// divide cuts r into about r.Bytes/target equal parts by key position
// (fewer when the keys between are too close to cut).
func divide(r keyrange.Restriction, target int64) []keyrange.Restriction {
	n := int((r.Bytes + target - 1) / target)
	var out []keyrange.Restriction
	start := r.Start
	var given int64
	for i := 1; i < n; i++ {
		k, ok := keyrange.Interpolate(r.Start, r.End, float64(i)/float64(n))
		if !ok || bytes.Compare(k, start) <= 0 {
			continue
		}
		part := keyrange.Restriction{Start: start, End: k, Bytes: r.Bytes / int64(n)}
		out = append(out, part)
		given += part.Bytes
		start = k
	}
	return append(out, keyrange.Restriction{Start: start, End: r.End, Bytes: r.Bytes - given})
}
