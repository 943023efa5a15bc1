package pipe

import (
	"strings"
	"testing"

	"github.com/tabuladb/tabula/beamio"
)

func TestParseTime(t *testing.T) {
	for in, want := range map[string]int64{"": 0, "1500000": 1_500_000, "2026-01-01T00:00:00Z": 1767225600_000000} {
		got, err := ParseTime("--t", in)
		if err != nil || got != want {
			t.Errorf("ParseTime(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	if _, err := ParseTime("--start-time", "yesterday"); err == nil || !strings.Contains(err.Error(), "--start-time") {
		t.Errorf("ParseTime(yesterday): %v", err)
	}
}

func TestSelectionReadConfig(t *testing.T) {
	tbl := beamio.Table{Addr: "x", Table: "t"}
	cfg, err := Selection{Start: "a", End: "m", Families: "f,g", Filter: `value_regex_filter: "x.*"`, StartTime: "1000"}.ReadConfig(tbl)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Ranges) != 1 || string(cfg.Ranges[0].End) != "m" || len(cfg.Families) != 2 || string(cfg.Filter.GetValueRegexFilter()) != "x.*" || cfg.StartTime != 1000 {
		t.Fatalf("config %+v", cfg)
	}
	for _, bad := range []Selection{
		{Start: "m", End: "a"},
		{Prefix: "p", Start: "a"},
		{Filter: "no such field: 1"},
		{EndTime: "soon"},
		{ScriptFile: "/nonexistent/x.szl"},
	} {
		if _, err := bad.ReadConfig(tbl); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}
