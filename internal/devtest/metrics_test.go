package devtest

import (
	"strings"
	"testing"
)

// TestSumMetric: samples of the named metric whose labels match are
// summed; other metrics, names that only start alike and other labels are
// not; a malformed value is an error.
func TestSumMetric(t *testing.T) {
	page := `# HELP m_total calls
# TYPE m_total counter
m_total{code="OK",method="ReadRow"} 3
m_total{code="OK",method="MutateRow"} 4 1700000000000
m_total{code="NotFound",method="ReadRow"} 5
m_total_extra{code="OK"} 100
other{code="OK"} 1000
m_total 7
`
	for _, c := range []struct {
		labels []string
		want   float64
	}{
		{nil, 19},
		{[]string{`code="OK"`}, 7},
		{[]string{`method="ReadRow"`}, 8},
		{[]string{`code="OK"`, `method="ReadRow"`}, 3},
		{[]string{`code="Internal"`}, 0},
	} {
		got, err := SumMetric(strings.NewReader(page), "m_total", c.labels...)
		if err != nil || got != c.want {
			t.Errorf("labels %v: %v, %v; want %v", c.labels, got, err, c.want)
		}
	}
	if _, err := SumMetric(strings.NewReader("m_total{a=\"b\"} x\n"), "m_total"); err == nil {
		t.Error("a malformed value was summed")
	}
}
