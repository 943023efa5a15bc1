package cluster_test

import (
	"bufio"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tabuladb/tabula/internal/devtest"
	"github.com/tabuladb/tabula/storage/cluster"
)

// TestDevPeriodicMajorCompaction: DevConfig.MajorInterval reaches the
// tablets — with a short interval, a table whose writes stopped is major
// compacted on its own (the server's tabula_compactions_total of kind
// major counts it), and its rows read the same.
func TestDevPeriodicMajorCompaction(t *testing.T) {
	s := devtest.StartT(t, cluster.DevConfig{HTTPAddr: "127.0.0.1:0", MemtableBytes: 64 << 10, MajorInterval: 50 * time.Millisecond})
	s.CreateTable(t, "pm", []string{"f", "g"})
	rows := devtest.Rows(1000) // about 200 KiB: past the 64 KiB memtable, flushed to SSTables
	s.WriteRows(t, "pm", rows)
	before := s.CellDump(t, "pm")
	deadline := time.Now().Add(30 * time.Second)
	for majorCompactions(t, "http://"+s.HTTPAddr()+"/metrics", "dev/pm") == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no major compaction of the table within 30 s at an interval of 50 ms")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if after := s.CellDump(t, "pm"); strings.Join(after, "\n") != strings.Join(before, "\n") {
		t.Fatalf("cells changed by the periodic major compaction: %d before, %d after", len(before), len(after))
	}
}

// majorCompactions reads the server's count of major compactions of
// table from its /metrics page.
func majorCompactions(t *testing.T, url, table string) float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	prefix := `tabula_compactions_total{kind="major",table="` + table + `"} `
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), prefix); ok {
			n, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	return 0
}
