package keyrange

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/sdf"
)

var _ sdf.BoundableRTracker = (*Tracker)(nil)

func rr(start, end string) Restriction {
	return Restriction{Start: []byte(start), End: []byte(end)}
}

func claimAll(t *testing.T, tr *Tracker, keys ...string) {
	t.Helper()
	for _, k := range keys {
		if !tr.TryClaim([]byte(k)) {
			t.Fatalf("TryClaim(%q) = false, want true (%v)", k, tr)
		}
	}
}

func TestTryClaim(t *testing.T) {
	tests := []struct {
		name     string
		rest     Restriction
		claims   []any
		wantOK   []bool
		wantErr  string // substring; "" no error
		wantDone bool
	}{
		{name: "increasing keys inside", rest: rr("b", "e"), claims: []any{[]byte("b"), []byte("c"), []byte("d\xff")}, wantOK: []bool{true, true, true}},
		{name: "key at end stops, done", rest: rr("b", "e"), claims: []any{[]byte("c"), []byte("e")}, wantOK: []bool{true, false}, wantDone: true},
		{name: "key past end stops, done", rest: rr("b", "e"), claims: []any{[]byte("z")}, wantOK: []bool{false}, wantDone: true},
		{name: "empty key claims the end", rest: rr("b", "e"), claims: []any{[]byte("c"), []byte{}}, wantOK: []bool{true, false}, wantDone: true},
		{name: "nil key claims the end", rest: rr("b", ""), claims: []any{[]byte(nil)}, wantOK: []bool{false}, wantDone: true},
		{name: "unbounded: any key inside", rest: rr("b", ""), claims: []any{[]byte("b"), []byte("\xff\xff\xff")}, wantOK: []bool{true, true}},
		{name: "before start is an error", rest: rr("b", "e"), claims: []any{[]byte("a")}, wantOK: []bool{false}, wantErr: "before the restriction"},
		{name: "repeated key is an error", rest: rr("b", "e"), claims: []any{[]byte("c"), []byte("c")}, wantOK: []bool{true, false}, wantErr: "not after"},
		{name: "decreasing key is an error", rest: rr("b", "e"), claims: []any{[]byte("d"), []byte("c")}, wantOK: []bool{true, false}, wantErr: "not after"},
		{name: "claim after stop is an error", rest: rr("b", "e"), claims: []any{[]byte("e"), []byte("f")}, wantOK: []bool{false, false}, wantErr: "after the tracker had stopped"},
		{name: "wrong type is an error", rest: rr("b", "e"), claims: []any{"c"}, wantOK: []bool{false}, wantErr: "want a []byte"},
		{name: "empty restriction: any claim ends", rest: rr("c", "c"), claims: []any{[]byte("c")}, wantOK: []bool{false}, wantDone: true},
		{name: "claiming the whole table from the empty start", rest: rr("", ""), claims: []any{[]byte("\x00"), []byte("a")}, wantOK: []bool{true, true}},
	}
	// Each case runs through TryClaim and, when every claim is a []byte,
	// through TryClaimKey: the two must agree.
	claimers := map[string]func(tr *Tracker, pos any) bool{
		"TryClaim": (*Tracker).TryClaim,
		"TryClaimKey": func(tr *Tracker, pos any) bool {
			return tr.TryClaimKey(pos.([]byte))
		},
	}
	for _, tc := range tests {
		for name, claim := range claimers {
			if name == "TryClaimKey" && slices.ContainsFunc(tc.claims, func(c any) bool { _, ok := c.([]byte); return !ok }) {
				continue
			}
			t.Run(name+"/"+tc.name, func(t *testing.T) {
				tr := NewTracker(tc.rest)
				for i, c := range tc.claims {
					if got := claim(tr, c); got != tc.wantOK[i] {
						t.Fatalf("claim %d (%q) = %v, want %v (%v)", i, c, got, tc.wantOK[i], tr)
					}
				}
				err := tr.GetError()
				if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
					t.Fatalf("GetError() = %v, want %q", err, tc.wantErr)
				}
				if got := tr.IsDone(); got != tc.wantDone {
					t.Fatalf("IsDone() = %v, want %v (%v)", got, tc.wantDone, tr)
				}
			})
		}
	}
}

// TestClaimKeepsItsOwnCopy: the tracker must not alias the caller's key
// (a reader may reuse its buffer), and claiming keys that fit the
// tracker's buffer allocates nothing.
func TestClaimKeepsItsOwnCopy(t *testing.T) {
	tr := NewTracker(rr("a", "z"))
	buf := []byte("m")
	if !tr.TryClaimKey(buf) {
		t.Fatal("TryClaimKey(m) = false")
	}
	buf[0] = 'b' // the caller reuses its buffer
	if tr.TryClaimKey([]byte("c")) {
		t.Fatalf("claiming c after m succeeded: the tracker aliased the caller's key (%v)", tr)
	}

	tr = NewTracker(rr("", ""))
	keys := make([][]byte, 200)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "row%05d", i)
	}
	tr.TryClaimKey(keys[0])
	i := 1
	allocs := testing.AllocsPerRun(100, func() {
		if !tr.TryClaimKey(keys[i]) {
			t.Fatalf("TryClaimKey(%q) = false (%v)", keys[i], tr)
		}
		i++
	})
	if allocs != 0 {
		t.Fatalf("TryClaimKey allocates %.1f times per claim, want 0", allocs)
	}
	if done, remaining := tr.GetProgress(); done <= 0 || remaining <= 0 {
		t.Fatalf("GetProgress() = %v, %v after claims inside an unbounded range", done, remaining)
	}
}

func TestIsDone(t *testing.T) {
	// Done without a final claim when nothing lies after the last claimed key.
	tr := NewTracker(rr("a", "b\x00"))
	claimAll(t, tr, "a", "b")
	if !tr.IsDone() {
		t.Fatalf("claimed b in [a, b\\x00): want done (%v)", tr)
	}
	tr = NewTracker(rr("a", "b\x00\x00"))
	claimAll(t, tr, "b")
	if tr.IsDone() {
		t.Fatalf("claimed b in [a, b\\x00\\x00): b\\x00 remains, want not done")
	}
	// Unbounded is never done without claiming the end.
	tr = NewTracker(rr("a", ""))
	claimAll(t, tr, "\xff\xff\xff\xff")
	if tr.IsDone() {
		t.Fatal("unbounded restriction done without claiming the end")
	}
	tr.TryClaim([]byte{})
	if !tr.IsDone() || tr.GetError() != nil {
		t.Fatalf("after claiming the end: done %v err %v", tr.IsDone(), tr.GetError())
	}
	// An error is not done.
	tr = NewTracker(rr("b", "c"))
	tr.TryClaim([]byte("a"))
	if tr.IsDone() {
		t.Fatal("a tracker stopped by an error reports done")
	}
	// The empty restriction is done at once.
	if tr := NewTracker(rr("b", "b")); !tr.IsDone() {
		t.Fatal("empty restriction not done")
	}
}

func TestTrySplit(t *testing.T) {
	tests := []struct {
		name         string
		rest         Restriction
		claimed      []string
		fraction     float64
		wantPrimary  Restriction
		wantResidual *Restriction // nil: no split
		wantBytes    int64        // the primary's Bytes after a split
	}{
		{name: "half before any claim", rest: rr("a", "b"), fraction: 0.5,
			wantPrimary: rr("a", "a\x80"), wantResidual: &Restriction{Start: []byte("a\x80"), End: []byte("b")}},
		{name: "zero before any claim: everything is residual", rest: rr("a", "b"), fraction: 0,
			wantPrimary: rr("a", "a"), wantResidual: &Restriction{Start: []byte("a"), End: []byte("b")}},
		{name: "zero after a claim: checkpoint at the successor", rest: rr("a", "b"), claimed: []string{"a\x10"}, fraction: 0,
			wantPrimary: rr("a", "a\x10\x00"), wantResidual: &Restriction{Start: []byte("a\x10\x00"), End: []byte("b")}},
		{name: "half of the remainder after a claim", rest: rr("a", "b"), claimed: []string{"a\x80"}, fraction: 0.5,
			wantPrimary: rr("a", "a\xc0"), wantResidual: &Restriction{Start: []byte("a\xc0"), End: []byte("b")}},
		{name: "one: nothing to give away", rest: rr("a", "b"), claimed: []string{"a\x80"}, fraction: 1, wantPrimary: rr("a", "b")},
		{name: "unbounded end, half", rest: rr("", ""), fraction: 0.5,
			wantPrimary: rr("", "\x80"), wantResidual: &Restriction{Start: []byte("\x80")}},
		{name: "unbounded end after a claim", rest: rr("m", ""), claimed: []string{"\xc0"}, fraction: 0.5,
			wantPrimary: rr("m", "\xe0"), wantResidual: &Restriction{Start: []byte("\xe0")}},
		{name: "tiny range: only keys of the same fraction remain", rest: rr("a", "b\x00\x00"), claimed: []string{"b"}, fraction: 0.5,
			wantPrimary: rr("a", "b\x00\x00")},
		{name: "tiny range, fraction 0 still checkpoints", rest: rr("a", "b\x00\x00"), claimed: []string{"b"}, fraction: 0,
			wantPrimary: rr("a", "b\x00"), wantResidual: &Restriction{Start: []byte("b\x00"), End: []byte("b\x00\x00")}},
		{name: "split of bytes follows the key position", rest: Restriction{Start: []byte("a"), End: []byte("b"), Bytes: 1000}, fraction: 0.25,
			wantPrimary: rr("a", "a\x40"), wantResidual: &Restriction{Start: []byte("a\x40"), End: []byte("b")}, wantBytes: 250},
		{name: "empty range", rest: rr("b", "b"), fraction: 0.5, wantPrimary: rr("b", "b")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := NewTracker(tc.rest)
			claimAll(t, tr, tc.claimed...)
			p, r, err := tr.TrySplit(tc.fraction)
			if err != nil {
				t.Fatal(err)
			}
			pr := p.(Restriction)
			if !sameKeys(pr, tc.wantPrimary) {
				t.Fatalf("primary = %v, want %v", pr, tc.wantPrimary)
			}
			if !sameKeys(tr.GetRestriction().(Restriction), pr) {
				t.Fatalf("tracker keeps %v, not the primary %v", tr.GetRestriction(), pr)
			}
			if tc.wantResidual == nil {
				if r != nil {
					t.Fatalf("residual = %v, want none", r)
				}
				if tr.Splits() != 0 {
					t.Fatalf("Splits() = %d after no split", tr.Splits())
				}
				return
			}
			if r == nil {
				t.Fatalf("no residual, want %v", *tc.wantResidual)
			}
			if !sameKeys(r.(Restriction), *tc.wantResidual) {
				t.Fatalf("residual = %v, want %v", r, *tc.wantResidual)
			}
			if res := r.(Restriction); pr.Bytes != tc.wantBytes || pr.Bytes+res.Bytes != tc.rest.Bytes {
				t.Fatalf("bytes: primary %d + residual %d, want %d + %d", pr.Bytes, res.Bytes, tc.wantBytes, tc.rest.Bytes-tc.wantBytes)
			}
			if tr.Splits() != 1 {
				t.Fatalf("Splits() = %d, want 1", tr.Splits())
			}
			if tc.fraction == 0 && !tr.IsDone() {
				t.Fatalf("not done after a checkpoint (%v)", tr)
			}
		})
	}
}

func sameKeys(a, b Restriction) bool {
	return bytes.Equal(a.Start, b.Start) && bytes.Equal(a.End, b.End)
}

func TestTrySplitAfterDoneOrStopped(t *testing.T) {
	tr := NewTracker(rr("a", "b"))
	tr.TryClaim([]byte{})
	if _, r, _ := tr.TrySplit(0.5); r != nil {
		t.Fatalf("split of a done tracker gave residual %v", r)
	}
	tr = NewTracker(rr("b", "c"))
	tr.TryClaim([]byte("a")) // error
	if _, r, _ := tr.TrySplit(0.5); r != nil {
		t.Fatalf("split of a failed tracker gave residual %v", r)
	}
}

func TestClaimsAfterSplit(t *testing.T) {
	tr := NewTracker(rr("a", "z"))
	claimAll(t, tr, "b")
	_, r, _ := tr.TrySplit(0.5)
	split := r.(Restriction).Start
	// Keys before the split key still belong to the primary.
	before := bytes.Clone(split)
	before[len(before)-1]--
	claimAll(t, tr, string(before))
	if tr.TryClaim(split) {
		t.Fatalf("claimed the split key %q: it belongs to the residual", split)
	}
	if !tr.IsDone() || tr.GetError() != nil {
		t.Fatalf("after a claim at the new end: done %v err %v", tr.IsDone(), tr.GetError())
	}
	// The residual's own tracker claims from the split key.
	rt := NewTracker(r.(Restriction))
	claimAll(t, rt, string(split), "y")
}

func TestGetProgress(t *testing.T) {
	tr := NewTracker(Restriction{Start: []byte("a"), End: []byte("b"), Bytes: 1000})
	done, rem := tr.GetProgress()
	if done != 0 || rem != 1000 {
		t.Fatalf("before claims: (%v, %v), want (0, 1000)", done, rem)
	}
	claimAll(t, tr, "a\x40")
	done, rem = tr.GetProgress()
	if done != 250 || rem != 750 {
		t.Fatalf("at a quarter: (%v, %v), want (250, 750)", done, rem)
	}
	tr.TryClaim([]byte{})
	done, rem = tr.GetProgress()
	if done != 1000 || rem != 0 {
		t.Fatalf("done: (%v, %v), want (1000, 0)", done, rem)
	}
	// Unknown size: a fraction of one.
	tr = NewTracker(rr("", ""))
	claimAll(t, tr, "\x80")
	if done, rem := tr.GetProgress(); done != 0.5 || rem != 0.5 {
		t.Fatalf("unsized at half: (%v, %v)", done, rem)
	}
}

func TestGetProgressMonotone(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, rest := range []Restriction{rr("", ""), rr("com.", "com/"), rr("a", "a\x00\x01"), {Start: []byte("k"), End: []byte("l"), Bytes: 1 << 30}} {
		keys := randomKeysIn(rng, rest, 500)
		tr := NewTracker(rest)
		prevDone, prevFrac := -1.0, -1.0
		for _, k := range keys {
			claimAll(t, tr, string(k))
			done, rem := tr.GetProgress()
			frac := done / (done + rem)
			if done < prevDone || frac < prevFrac || rem < 0 {
				t.Fatalf("%v: progress went back at %q: done %v (was %v), fraction %v (was %v)", rest, k, done, prevDone, frac, prevFrac)
			}
			prevDone, prevFrac = done, frac
		}
	}
}

// randomKeysIn returns up to n distinct sorted keys inside rest.
func randomKeysIn(rng *rand.Rand, rest Restriction, n int) [][]byte {
	seen := map[string]bool{}
	var out [][]byte
	for i := 0; i < 20*n && len(out) < n; i++ {
		k := append(bytes.Clone(rest.Start), randomBytes(rng, 1+rng.IntN(4))...)
		if rng.IntN(4) == 0 {
			k = randomBytes(rng, 1+rng.IntN(6))
		}
		if !rest.Contains(k) || seen[string(k)] {
			continue
		}
		seen[string(k)] = true
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool { return bytes.Compare(out[i], out[j]) < 0 })
	return out
}

func randomBytes(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		switch rng.IntN(4) {
		case 0:
			b[i] = 0
		case 1:
			b[i] = 0xff
		default:
			b[i] = byte(rng.IntN(256))
		}
	}
	return b
}

// TestSplitCoversEveryKey splits a restriction repeatedly at random
// fractions while claiming, as a runner would, and checks that every key
// of a fixed set is processed by exactly one restriction.
func TestSplitCoversEveryKey(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for round := 0; round < 200; round++ {
		rest := Restriction{Start: randomBytes(rng, rng.IntN(3)), Bytes: 1 << 20}
		if rng.IntN(2) == 0 {
			rest.End = append(bytes.Clone(rest.Start), randomBytes(rng, 1+rng.IntN(3))...)
			rest.End[len(rest.End)-1] |= 1 // non-zero: a key lies between
		}
		keys := randomKeysIn(rng, rest, 300)
		seen := map[string]int{}
		queue := []Restriction{rest}
		for len(queue) > 0 {
			cur := queue[0]
			queue = queue[1:]
			tr := NewTracker(cur)
			i := sort.Search(len(keys), func(i int) bool { return bytes.Compare(keys[i], cur.Start) >= 0 })
			for ; ; i++ {
				if rng.IntN(10) == 0 {
					_, r, err := tr.TrySplit(rng.Float64())
					if err != nil {
						t.Fatal(err)
					}
					if r != nil {
						queue = append(queue, r.(Restriction))
					}
				}
				var k []byte
				if i < len(keys) {
					k = keys[i]
				}
				if !tr.TryClaim(k) {
					break
				}
				seen[string(k)]++
			}
			if err := tr.GetError(); err != nil {
				t.Fatal(err)
			}
			if !tr.IsDone() {
				t.Fatalf("%v not done after reading to the end", tr)
			}
		}
		for _, k := range keys {
			if seen[string(k)] != 1 {
				t.Fatalf("round %d: key %q processed %d times", round, k, seen[string(k)])
			}
		}
	}
}

// FuzzInterpolate checks the split key's contract for any bounds and
// fraction: inside [from, end), strictly after from when the fraction is
// positive, and a split of a tracker that leaves primary and residual
// adjacent and covering the original.
func FuzzInterpolate(f *testing.F) {
	f.Add([]byte("a"), []byte("b"), 0.5)
	f.Add([]byte(""), []byte(""), 0.5)
	f.Add([]byte("ab"), []byte("ab\x00"), 0.5)
	f.Add([]byte("ab\x00"), []byte("ab\x00\x01"), 0.999)
	f.Add([]byte("\xff\xff"), []byte(""), 1e-9)
	f.Fuzz(func(t *testing.T, from, end []byte, frac float64) {
		if len(from) > 64 || len(end) > 64 {
			return
		}
		s, ok := Interpolate(from, end, frac)
		empty := len(end) > 0 && bytes.Compare(from, end) >= 0
		if empty && ok {
			t.Fatalf("Interpolate(%q, %q, %v) = %q on an empty range", from, end, frac, s)
		}
		if ok {
			if bytes.Compare(s, from) < 0 || len(end) > 0 && bytes.Compare(s, end) >= 0 {
				t.Fatalf("Interpolate(%q, %q, %v) = %q outside [from, end)", from, end, frac, s)
			}
			if frac > 0 && frac <= 1 && bytes.Equal(s, from) && !bytes.Equal(Successor(from), end) {
				// Moving off from is possible unless end is from+zeros.
				if len(bytes.TrimRight(end[min(len(from), len(end)):], "\x00")) > 0 || len(end) == 0 {
					t.Fatalf("Interpolate(%q, %q, %v) = from, want progress", from, end, frac)
				}
			}
		}
		if empty {
			return
		}
		rest := Restriction{Start: from, End: end, Bytes: 1000}
		tr := NewTracker(rest)
		p, r, err := tr.TrySplit(frac)
		if err != nil {
			t.Fatal(err)
		}
		pr := p.(Restriction)
		if !bytes.Equal(pr.Start, from) {
			t.Fatalf("primary %v does not start at %q", pr, from)
		}
		if r == nil {
			if !sameKeys(pr, rest) {
				t.Fatalf("no residual but primary %v != %v", pr, rest)
			}
			return
		}
		res := r.(Restriction)
		if !bytes.Equal(pr.End, res.Start) || !bytes.Equal(res.End, end) || pr.Bytes+res.Bytes != rest.Bytes {
			t.Fatalf("primary %v + residual %v != %v", pr, res, rest)
		}
		if len(end) > 0 && bytes.Compare(res.Start, end) >= 0 {
			t.Fatalf("empty residual %v", res)
		}
	})
}

// TestTryClaimKeysIsClaimsInTurn: claiming a batch of keys at once
// claims what claiming them one by one claims — the same count, then the
// same state (stopped, done, error, where a split falls and what a next
// claim does) — on random restrictions, batches (in order, out of order,
// crossing the end, the empty key) and splits between batches.
func TestTryClaimKeysIsClaimsInTurn(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 4))
	key := func() []byte {
		if r.IntN(30) == 0 {
			return nil
		}
		return []byte(fmt.Sprintf("k%03d", r.IntN(200)))
	}
	state := func(tr *Tracker) string {
		tr.mu.Lock()
		defer tr.mu.Unlock()
		return fmt.Sprintf("claimed %q ended %v stopped %v err %v done %v rest %v", tr.claimed, tr.ended, tr.stopped, tr.err != nil, tr.isDone(), tr.rest)
	}
	for trial := range 2000 {
		rest := Restriction{Start: []byte(fmt.Sprintf("k%03d", r.IntN(60)))}
		if r.IntN(3) > 0 {
			rest.End = []byte(fmt.Sprintf("k%03d", 100+r.IntN(100)))
		}
		one, batch := NewTracker(rest), NewTracker(rest)
		next := rest.Start
		for step := 0; step < 8; step++ {
			var keys [][]byte
			for range r.IntN(6) {
				if r.IntN(8) == 0 {
					keys = append(keys, key()) // anywhere
					continue
				}
				next = append(slices.Clone(next), byte('a'+r.IntN(3)))
				keys = append(keys, next)
			}
			want := 0
			for _, k := range keys {
				if !one.TryClaimKey(k) {
					break
				}
				want++
			}
			got := batch.TryClaimKeys(len(keys), func(i int) []byte { return keys[i] })
			if got != want || state(batch) != state(one) {
				t.Fatalf("trial %d step %d: keys %q on %v: claimed %d, %s; one by one %d, %s", trial, step, keys, rest, got, state(batch), want, state(one))
			}
			if r.IntN(4) == 0 {
				f := r.Float64()
				p1, r1, e1 := one.TrySplit(f)
				p2, r2, e2 := batch.TrySplit(f)
				if fmt.Sprint(p1, r1, e1) != fmt.Sprint(p2, r2, e2) {
					t.Fatalf("trial %d: TrySplit(%v) differs: %v %v %v against %v %v %v", trial, f, p2, r2, e2, p1, r1, e1)
				}
			}
		}
	}
}
