package fanout

import (
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
)

// show renders batches as "dest:i,j(bytes/count)" in the order sent.
func show[D comparable](bs []*Batch[D]) string {
	var parts []string
	for _, b := range bs {
		idx := make([]string, len(b.Idx))
		for j, i := range b.Idx {
			idx[j] = fmt.Sprint(i)
		}
		parts = append(parts, fmt.Sprintf("%v:%s(%d/%d)", b.Dest, strings.Join(idx, ","), b.Bytes, b.Count))
	}
	return strings.Join(parts, " ")
}

func TestGroup(t *testing.T) {
	dests := []string{"b", "a", "", "b", "c", "a", "", "b"}
	dest := func(i int) (string, bool) { return dests[i], dests[i] != "" }
	for _, tc := range []struct {
		name      string
		idx       []int
		want      string
		wantRest  []int
		wantEmpty bool
	}{
		{name: "all", idx: Seq(len(dests)), want: "b:0,3,7(0/0) a:1,5(0/0) c:4(0/0)", wantRest: []int{2, 6}},
		// The order of idx decides the order of batches and within them.
		{name: "reordered", idx: []int{7, 5, 4, 3, 1, 0}, want: "b:7,3,0(0/0) a:5,1(0/0) c:4(0/0)"},
		{name: "subset", idx: []int{2, 4}, want: "c:4(0/0)", wantRest: []int{2}},
		{name: "none", idx: nil, wantEmpty: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, rest := Group(tc.idx, dest)
			if show(got) != tc.want {
				t.Errorf("batches %q, want %q", show(got), tc.want)
			}
			if !reflect.DeepEqual(rest, tc.wantRest) {
				t.Errorf("rest %v, want %v", rest, tc.wantRest)
			}
			if tc.wantEmpty && (len(got) != 0 || len(rest) != 0) {
				t.Errorf("got %v %v for no entries", got, rest)
			}
		})
	}
}

// entry is an entry added to a Batcher: destination, bytes, count.
type entry struct {
	dest         string
	bytes, count int
}

func TestBatcherLimits(t *testing.T) {
	for _, tc := range []struct {
		name    string
		limits  Limits
		entries []entry
		// sent before Flush, then after it.
		wantAdd, wantFlush string
	}{{
		name:      "unbounded",
		entries:   []entry{{"a", 5, 1}, {"b", 5, 1}, {"a", 5, 1}},
		wantFlush: "a:0,2(10/2) b:1(5/1)",
	}, {
		name:      "entries",
		limits:    Limits{Entries: 2},
		entries:   []entry{{"a", 1, 1}, {"b", 1, 1}, {"a", 1, 1}, {"a", 1, 1}},
		wantAdd:   "a:0,2(2/2)",
		wantFlush: "b:1(1/1) a:3(1/1)",
	}, {
		name:      "bytes reached",
		limits:    Limits{Bytes: 10},
		entries:   []entry{{"a", 4, 1}, {"a", 6, 1}, {"a", 1, 1}, {"b", 30, 1}},
		wantAdd:   "a:0,1(10/2) b:3(30/1)",
		wantFlush: "a:2(1/1)",
	}, {
		// An entry that would carry the batch past Count goes into the
		// next batch; one whose count alone passes it goes alone.
		name:      "count",
		limits:    Limits{Count: 10},
		entries:   []entry{{"a", 0, 6}, {"a", 0, 6}, {"a", 0, 20}, {"a", 0, 3}, {"a", 0, 7}},
		wantAdd:   "a:0(0/6) a:1(0/6) a:2(0/20) a:3,4(0/10)",
		wantFlush: "",
	}, {
		// A destination that sent a batch and came back is flushed at
		// its new place, once.
		name:      "flush order after a send",
		limits:    Limits{Entries: 2},
		entries:   []entry{{"a", 0, 0}, {"b", 0, 0}, {"a", 0, 0}, {"c", 0, 0}, {"a", 0, 0}},
		wantAdd:   "a:0,2(0/0)",
		wantFlush: "b:1(0/0) c:3(0/0) a:4(0/0)",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			var sent []*Batch[string]
			b := NewBatcher(tc.limits, func(p *Batch[string]) { sent = append(sent, p) })
			for i, e := range tc.entries {
				b.Add(e.dest, i, e.bytes, e.count)
			}
			if got := show(sent); got != tc.wantAdd {
				t.Errorf("sent while adding %q, want %q", got, tc.wantAdd)
			}
			n := len(sent)
			b.Flush()
			if got := show(sent[n:]); got != tc.wantFlush {
				t.Errorf("flushed %q, want %q", got, tc.wantFlush)
			}
			m := len(sent)
			b.Flush()
			if len(sent) != m {
				t.Errorf("a second Flush sent %q again", show(sent[m:]))
			}
			// Every entry is sent exactly once.
			seen := make(map[int]int)
			for _, p := range sent {
				for _, i := range p.Idx {
					seen[i]++
				}
			}
			for i := range tc.entries {
				if seen[i] != 1 {
					t.Errorf("entry %d sent %d times", i, seen[i])
				}
			}
		})
	}
}

func TestEachRunsEveryBatchConcurrently(t *testing.T) {
	batches, _ := Group(Seq(6), func(i int) (int, bool) { return i % 3, true })
	// Every call waits for all three to have started: run one after the
	// other, the first would never return.
	var started sync.WaitGroup
	started.Add(len(batches))
	out := make([]int, 6)
	Each(batches, func(b *Batch[int]) {
		started.Done()
		started.Wait()
		for _, i := range b.Idx {
			out[i] = b.Dest + 1
		}
	})
	if want := []int{1, 2, 3, 1, 2, 3}; !reflect.DeepEqual(out, want) {
		t.Errorf("outcomes %v, want %v", out, want)
	}
	called := false
	Each([]*Batch[int](nil), func(*Batch[int]) { called = true })
	if called {
		t.Error("Each called fn with no batches")
	}
}
