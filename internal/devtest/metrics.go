package devtest

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// SumMetric sums the samples of the metric name in a Prometheus text
// exposition (a server's /metrics) whose labels include every one of
// labels, each written as it appears there (`code="OK"`).
func SumMetric(page io.Reader, name string, labels ...string) (float64, error) {
	var sum float64
	sc := bufio.NewScanner(page)
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, name)
		if !ok || (rest != "" && rest[0] != '{' && rest[0] != ' ') {
			continue // another metric, or one whose name only starts so
		}
		matched := true
		for _, l := range labels {
			if !strings.Contains(rest, l) {
				matched = false
				break
			}
		}
		if !matched {
			continue
		}
		fields := strings.Fields(rest[strings.LastIndexByte(rest, '}')+1:])
		if len(fields) == 0 {
			return 0, fmt.Errorf("metrics line %q: no value", line)
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			return 0, fmt.Errorf("metrics line %q: %v", line, err)
		}
		sum += v
	}
	return sum, sc.Err()
}
