package webtable

import (
	"bytes"
	"testing"

	"github.com/tabuladb/tabula/storage/cell"
)

func TestPagesAreDeterministicAndValid(t *testing.T) {
	g := Generator{Seed: 7}
	limits := cell.DefaultLimits()
	langs := map[string]int{}
	hosts := map[string]int{}
	for i := 0; i < 2000; i++ {
		p := g.Page(i)
		if q := g.Page(i); !bytes.Equal(p.Key, q.Key) || len(p.Mutation.Mutations) != len(q.Mutation.Mutations) {
			t.Fatalf("page %d differs between calls", i)
		}
		if err := limits.ValidateRowMutation(p.Mutation); err != nil {
			t.Fatalf("page %d: %v", i, err)
		}
		langs[p.Language]++
		hosts[string(bytes.SplitN(p.Key, []byte("/"), 2)[0])]++
	}
	if p := g.Page(0); string(p.Key) != "com.cnn.www" {
		t.Fatalf("page 0 is %q, want com.cnn.www", p.Key)
	}
	if langs["en"] < 800 || len(langs) < 5 {
		t.Fatalf("language mix %v is not skewed towards en", langs)
	}
	// Skew: the largest site holds far more pages than a typical one.
	if hosts["com.cnn.www"] < 50 || len(hosts) < 200 {
		t.Fatalf("site mix not skewed: cnn %d pages, %d sites", hosts["com.cnn.www"], len(hosts))
	}
}

func TestReverseHost(t *testing.T) {
	if got := string(RowKey("www.cnn.com/sports/1")); got != "com.cnn.www/sports/1" {
		t.Fatalf("got %q", got)
	}
}
