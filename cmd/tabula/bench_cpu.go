package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// CPU per operation: on a machine whose load changes from minute to minute
// a rate moves with the load, but the CPU a server spends per operation
// moves far less. bench reads each target's process CPU before and after
// every workload it times and reports the difference per operation, next
// to the bench process's own (the client's).

// cpuMeter reads the CPU time a process has used so far.
type cpuMeter interface {
	// CPUSeconds returns the process's user and system CPU time, in
	// seconds, since it started. Two readings' difference is the CPU it
	// used in between.
	CPUSeconds(ctx context.Context) (float64, error)
}

// metricsCPU reads a server's process_cpu_seconds_total (the Prometheus
// Go client's process collector) from its /metrics page: any server that
// exports it can be measured, on this machine or another.
type metricsCPU struct {
	url    string
	client *http.Client
}

func newMetricsCPU(url string) *metricsCPU {
	return &metricsCPU{url: url, client: &http.Client{Timeout: 10 * time.Second}}
}

func (m *metricsCPU) CPUSeconds(ctx context.Context) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, m.url, nil)
	if err != nil {
		return 0, fmt.Errorf("--server-metrics %s: %w", m.url, err)
	}
	resp, err := m.client.Do(req)
	if err != nil {
		return 0, fmt.Errorf("--server-metrics %s: %w", m.url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("--server-metrics %s: %s", m.url, resp.Status)
	}
	v, err := processCPUFromMetrics(resp.Body)
	if err != nil {
		return 0, fmt.Errorf("--server-metrics %s: %w", m.url, err)
	}
	return v, nil
}

// processCPUMetric is the process collector's CPU counter.
const processCPUMetric = "process_cpu_seconds_total"

// processCPUFromMetrics returns the value of process_cpu_seconds_total in
// a page of the Prometheus text format (a sample line is the name, labels
// in braces if any, the value and perhaps a timestamp).
func processCPUFromMetrics(r io.Reader) (float64, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, processCPUMetric)
		if !ok || rest == "" || (rest[0] != ' ' && rest[0] != '{') {
			continue // a comment, another metric, or a longer name
		}
		if rest[0] == '{' {
			end := strings.IndexByte(rest, '}')
			if end < 0 {
				return 0, fmt.Errorf("malformed sample %q", line)
			}
			rest = rest[end+1:]
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			return 0, fmt.Errorf("malformed sample %q", line)
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			return 0, fmt.Errorf("malformed sample %q: %w", line, err)
		}
		return v, nil
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("no %s on the page (not a Prometheus /metrics page of a Go server with the process collector?)", processCPUMetric)
}

// procCPU reads a local process's CPU time from /proc/PID/stat (Linux):
// for the emulator, which bench starts itself and which has no /metrics.
type procCPU struct{ pid int }

// clockTicks is the unit of /proc's CPU times: USER_HZ, 100 on every
// Linux architecture Go supports.
const clockTicks = 100

func (p procCPU) CPUSeconds(context.Context) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.pid))
	if err != nil {
		return 0, err
	}
	return cpuFromProcStat(b)
}

// readable reports whether p's CPU time can be read (there is a /proc).
func (p procCPU) readable(ctx context.Context) bool {
	_, err := p.CPUSeconds(ctx)
	return err == nil
}

// cpuFromProcStat returns utime+stime in seconds from the contents of a
// /proc/PID/stat file. The command name (field 2) is in parentheses and
// may itself hold spaces and parentheses, so fields are counted from the
// last ')'.
func cpuFromProcStat(b []byte) (float64, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, errors.New("/proc stat: no command name")
	}
	// After the name: state (field 3), ..., utime (14), stime (15).
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc stat: %d fields after the command name, want at least 13", len(f))
	}
	utime, err1 := strconv.ParseUint(f[11], 10, 64)
	stime, err2 := strconv.ParseUint(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("/proc stat: %w", err)
	}
	return float64(utime+stime) / clockTicks, nil
}

// selfCPU reads this process's CPU time: the bench client's.
type selfCPU struct{}

func (selfCPU) CPUSeconds(context.Context) (float64, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, err
	}
	return tvSeconds(ru.Utime) + tvSeconds(ru.Stime), nil
}

func tvSeconds(tv syscall.Timeval) float64 {
	return float64(tv.Sec) + float64(tv.Usec)/1e6
}

// measureCPU runs f between two readings of each meter (nil meters are
// skipped) and returns each meter's CPU seconds in between, -1 for a nil
// meter. A meter that fails is an error: a figure that cannot be read is
// not reported as zero.
func measureCPU(ctx context.Context, meters []cpuMeter, f func() error) ([]float64, error) {
	before := make([]float64, len(meters))
	for i, m := range meters {
		if m == nil {
			continue
		}
		v, err := m.CPUSeconds(ctx)
		if err != nil {
			return nil, err
		}
		before[i] = v
	}
	if err := f(); err != nil {
		return nil, err
	}
	out := make([]float64, len(meters))
	for i, m := range meters {
		if m == nil {
			out[i] = -1
			continue
		}
		v, err := m.CPUSeconds(ctx)
		if err != nil {
			return nil, err
		}
		out[i] = v - before[i]
	}
	return out, nil
}
