// Package keyrange is a Beam restriction over Bigtable row keys, and its
// restriction tracker: what a splittable DoFn reading a sorted key space
// (a Tabula or Bigtable table) claims and splits, as Java's
// ByteKeyRangeTracker does and the Go SDK's offsetrange does for
// integers (the Go SDK has no key-range tracker).
//
// Keys are ordered as bytes.Compare orders them. For interpolation and
// progress a key is read as a big-endian fraction of [0, 1): byte i
// weighs 256^-(i+1), and an unbounded end is 1. Keys that differ only by
// trailing zero bytes ("a" and "a\x00") have the same fraction although
// they are distinct keys; the functions here take care that a split key
// still lies strictly between the keys it must separate.
package keyrange

import (
	"bytes"
	"fmt"
	"math"
	"math/big"
)

// Restriction is the row keys [Start, End): an empty Start is the
// beginning of the table, an empty End its end (unbounded). Bytes is an
// estimate of the data it covers (0: unknown), used to size work for the
// runner; splits divide it by key position.
type Restriction struct {
	Start, End []byte
	Bytes      int64
}

// Unbounded reports whether the restriction runs to the end of the table.
func (r Restriction) Unbounded() bool { return len(r.End) == 0 }

// Empty reports whether no key lies in the restriction.
func (r Restriction) Empty() bool {
	return !r.Unbounded() && bytes.Compare(r.Start, r.End) >= 0
}

// Contains reports whether key lies in [Start, End).
func (r Restriction) Contains(key []byte) bool {
	return bytes.Compare(key, r.Start) >= 0 && (r.Unbounded() || bytes.Compare(key, r.End) < 0)
}

func (r Restriction) String() string {
	end := fmt.Sprintf("%q", r.End)
	if r.Unbounded() {
		end = "∞"
	}
	return fmt.Sprintf("[%q, %s) ~%dB", r.Start, end, r.Bytes)
}

// Successor returns the smallest key after key: key followed by a zero
// byte.
func Successor(key []byte) []byte {
	s := make([]byte, len(key)+1)
	copy(s, key)
	return s
}

// interpolationBytes is the precision added beyond the longer bound when
// interpolating: enough to find a key between bounds that differ only in
// their last bytes.
const interpolationBytes = 8

// Interpolate returns a key s at about fraction f of [from, end) (empty
// end: unbounded) by key position, with from <= s and s < end; s == from
// only when f <= 0 or f is too small to move off from. f is clamped to
// [0, 1]. ok is false when there is no such key: the range is empty, or
// f > 0 and no key short of end lies at or past the fraction (the range
// is too narrow to split: end is from followed by zero bytes, or f
// rounds up to end).
func Interpolate(from, end []byte, f float64) (s []byte, ok bool) {
	if len(end) > 0 && bytes.Compare(from, end) >= 0 {
		return nil, false
	}
	if f <= 0 || math.IsNaN(f) {
		return bytes.Clone(from), true
	}
	f = min(f, 1)
	n := max(len(from), len(end)) + interpolationBytes
	a := pad(from, n)
	var b *big.Int
	if len(end) == 0 {
		b = new(big.Int).Lsh(big.NewInt(1), uint(8*n))
	} else {
		b = pad(end, n)
	}
	d := new(big.Int).Sub(b, a)
	if d.Sign() <= 0 {
		return nil, false // end is from followed by zero bytes
	}
	// s = a + ceil(d*f), f as a 53-bit binary fraction.
	const fracBits = 53
	num := new(big.Int).SetUint64(uint64(math.Round(f * (1 << fracBits))))
	step := new(big.Int).Mul(d, num)
	step.Add(step, new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), fracBits), big.NewInt(1)))
	step.Rsh(step, fracBits)
	si := new(big.Int).Add(a, step)
	if si.Cmp(b) >= 0 {
		return nil, false
	}
	if si.Cmp(a) == 0 {
		return bytes.Clone(from), true
	}
	return unpad(si, n), true
}

// pad reads key as an n-byte big-endian integer, zero-filled on the right
// (n >= len(key)).
func pad(key []byte, n int) *big.Int {
	buf := make([]byte, n)
	copy(buf, key)
	return new(big.Int).SetBytes(buf)
}

// unpad writes v as n big-endian bytes and drops trailing zeros: the
// shortest key with v's fraction.
func unpad(v *big.Int, n int) []byte {
	buf := v.FillBytes(make([]byte, n))
	return bytes.TrimRight(buf, "\x00")
}

// positionBytes bounds the bytes after the bounds' common prefix that
// Position reads: more would not change a float64.
const positionBytes = 16

// Position returns where key lies in [start, end) (empty end: unbounded)
// by key position, from 0 at start to 1 at end, clamped to [0, 1]. It is
// monotone: a larger key never has a smaller position. A range whose
// bounds have the same fraction (end is start followed by zero bytes)
// puts every key at 0.
func Position(start, end, key []byte) float64 {
	p := commonPrefix(start, end)
	n := p + positionBytes
	trunc := func(k []byte) []byte { return k[:min(len(k), n)] }
	a := pad(trunc(start), n)
	var b *big.Int
	if len(end) == 0 {
		b = new(big.Int).Lsh(big.NewInt(1), uint(8*n))
	} else {
		b = pad(trunc(end), n)
	}
	d := new(big.Int).Sub(b, a)
	if d.Sign() <= 0 {
		return 0
	}
	k := pad(trunc(key), n)
	if k.Cmp(a) <= 0 {
		return 0
	}
	if k.Cmp(b) >= 0 {
		return 1
	}
	num := new(big.Float).SetInt(new(big.Int).Sub(k, a))
	den := new(big.Float).SetInt(d)
	f, _ := new(big.Float).Quo(num, den).Float64()
	return min(max(f, 0), 1)
}

// commonPrefix returns the length of the common prefix of a and b; an
// empty b (the unbounded end) shares nothing.
func commonPrefix(a, b []byte) int {
	if len(b) == 0 {
		return 0
	}
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	return i
}
