package assign

import (
	"fmt"
	"testing"
)

// BenchmarkPlan: 10,000 tablets on 20 servers, one server new and empty
// (the balance search at its widest), and the same tablets all unassigned
// (startup).
func BenchmarkPlan(b *testing.B) {
	mk := func(placed bool) State {
		st := State{Tablets: append(metaTablets(4), userTablets(10000, 0)...)}
		for i := 0; i < 20; i++ {
			st.Live = append(st.Live, Server{ID: ServerID(fmt.Sprintf("s%02d", i))})
		}
		for i := range st.Tablets {
			st.Tablets[i].Size = int64(1+i%5) << 20
			if placed {
				s := &st.Live[i%19]
				s.Serving = append(s.Serving, Served{ID: st.Tablets[i].ID})
			}
		}
		return st
	}
	for _, tc := range []struct {
		name string
		st   State
	}{{"balance", mk(true)}, {"startup", mk(false)}} {
		b.Run(tc.name, func(b *testing.B) {
			for b.Loop() {
				Plan(tc.st, Config{})
			}
		})
	}
}
