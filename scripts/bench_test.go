package scripts

import (
	"container/heap"
	"os"
	"testing"

	"github.com/axiomhq/hyperloglog"

	"github.com/tabuladb/tabula/storage/cell"
)

// BenchmarkWebtableScript runs the example program; ns/op is per
// row.
func BenchmarkWebtableScript(b *testing.B) {
	rows := webtableRows(1000, 9)
	p := webtableProgram(b)
	r := p.NewRun(Limits{})
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if _, err := r.Process(rows[i%len(rows)]); err != nil {
			b.Fatal(err)
		}
	}
}

// sizeHeap is a min-heap of pages by size, for the Go version.
type sizeHeap []goPage

type goPage struct {
	url  string
	size int
}

func (h sizeHeap) Len() int           { return len(h) }
func (h sizeHeap) Less(i, j int) bool { return h[i].size < h[j].size }
func (h sizeHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *sizeHeap) Push(x any)        { *h = append(*h, x.(goPage)) }
func (h *sizeHeap) Pop() any {
	x := (*h)[len(*h)-1]
	*h = (*h)[:len(*h)-1]
	return x
}

// webtableGo is the example program written directly in Go, with the
// natural Go structures: maps for the sums, a heap for the ten largest, a
// HyperLogLog sketch for the distinct sites.
type webtableGo struct {
	pages, refs map[string]int64
	largest     sizeHeap
	sites       *hyperloglog.Sketch
}

func (w *webtableGo) process(row cell.Row) {
	lang := "unknown"
	for i := range row.Cells {
		c := &row.Cells[i]
		if c.Family == "language" {
			lang = string(c.Value)
		}
		if c.Family == "anchor" {
			w.refs[string(c.Qualifier)]++
			w.sites.Insert(c.Qualifier)
		}
	}
	w.pages[lang]++
	for i := range row.Cells {
		if row.Cells[i].Family == "contents" {
			p := goPage{string(row.Key), len(row.Cells[i].Value)}
			if len(w.largest) < 10 {
				heap.Push(&w.largest, p)
			} else if p.size > w.largest[0].size {
				w.largest[0] = p
				heap.Fix(&w.largest, 0)
			}
			break
		}
	}
}

// BenchmarkWebtableGo is the same logic in Go, for the ratio.
func BenchmarkWebtableGo(b *testing.B) {
	rows := webtableRows(1000, 9)
	w := &webtableGo{pages: map[string]int64{}, refs: map[string]int64{}, sites: hyperloglog.New14()}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		w.process(rows[i%len(rows)])
	}
	if len(w.pages) == 0 {
		b.Fatal("nothing counted")
	}
}

// BenchmarkCompile measures parsing, checking and compiling the example,
// which a tablet server does once per request.
func BenchmarkCompile(b *testing.B) {
	src, err := os.ReadFile("testdata/webtable.szl")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Compile("webtable.szl", string(src)); err != nil {
			b.Fatal(err)
		}
	}
}
