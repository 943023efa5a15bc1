package tabletserver

import (
	"testing"
)

// TestCommitLogMetrics: the commit log's counters are exported and move
// with the writes: three acknowledged MutateRows are at least three
// appended and flushed records, in at least one flush that took time.
func TestCommitLogMetrics(t *testing.T) {
	e := newTestEnv(t, HostOptions{}, DataOptions{})
	before := e.host.opts.Log.Stats()
	filterData(t, e) // three MutateRows
	mfs, err := e.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if c := m.GetCounter(); c != nil {
				got[mf.GetName()] += c.GetValue()
			}
		}
	}
	for name, atLeast := range map[string]float64{
		"tabula_commitlog_appends_total":         float64(before.Appends + 3),
		"tabula_commitlog_flushed_records_total": float64(before.FlushedRecords + 3),
		"tabula_commitlog_flushes_total":         float64(before.Flushes + 1),
		"tabula_commitlog_flushed_bytes_total":   float64(before.FlushedBytes + 3),
	} {
		if v, ok := got[name]; !ok || v < atLeast {
			t.Errorf("%s = %v (exported: %v), want at least %v", name, v, ok, atLeast)
		}
	}
	if v := got["tabula_commitlog_flush_seconds_total"]; v <= before.FlushTime.Seconds() {
		t.Errorf("tabula_commitlog_flush_seconds_total = %v, want more than %v", v, before.FlushTime.Seconds())
	}
}
