package crashtest

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/tablet"
)

func TestMain(m *testing.M) {
	RunWriterFromEnv() // the subprocess role; returns in the parent
	os.Exit(m.Run())
}

// op is one row mutation the writer tried, in the row's order.
type op struct {
	ts    int64
	del   bool
	acked bool
	run   int // the run it was tried in
}

// history is what the writers said, per row.
type history struct {
	ops   map[int][]*op
	byTS  map[int64]*op
	acks  int
	tries int
}

func newHistory() *history {
	return &history{ops: map[int][]*op{}, byTS: map[int64]*op{}}
}

// record parses the writer's output. Lines cut off by the kill (no
// newline) are ignored: the parent never learned of them.
func (h *history) record(t *testing.T, run int, out []byte) {
	for len(out) > 0 {
		i := bytes.IndexByte(out, '\n')
		if i < 0 {
			return
		}
		line := string(out[:i])
		out = out[i+1:]
		var row int
		var ts int64
		var kind string
		switch {
		case strings.HasPrefix(line, "try "):
			if _, err := fmt.Sscanf(line, "try %d %d %s", &row, &ts, &kind); err != nil {
				t.Fatalf("bad line %q: %v", line, err)
			}
			o := &op{ts: ts, del: kind == "delrow", run: run}
			h.ops[row] = append(h.ops[row], o)
			h.byTS[ts] = o
			h.tries++
		case strings.HasPrefix(line, "ack "):
			if _, err := fmt.Sscanf(line, "ack %d %d", &row, &ts); err != nil {
				t.Fatalf("bad line %q: %v", line, err)
			}
			o := h.byTS[ts]
			if o == nil {
				t.Fatalf("ack of untried timestamp %d", ts)
			}
			o.acked = true
			h.acks++
		case line == "ready":
		default:
			t.Fatalf("unexpected writer output %q", line)
		}
	}
}

// verify opens the tablet (recovering it) and checks it against the
// history: every acknowledged mutation is there unless a later delete of
// its row may have been applied, nothing is there that was not tried, every
// mutation is whole, and nothing older than an applied row delete survives.
func (h *history) verify(t *testing.T, dir string, run int) {
	t.Helper()
	ctx := context.Background()
	e, err := OpenEngine(ctx, dir, 1<<20)
	if err != nil {
		t.Fatalf("run %d: reopen after kill: %v", run, err)
	}
	defer func() {
		if err := e.Close(); err != nil {
			t.Fatalf("run %d: close: %v", run, err)
		}
	}()
	present := map[int]map[int64]int{} // row → ts → cells
	err = e.Tablet.Scan(ctx, tablet.ScanOptions{}, func(r cell.Row) error {
		var row int
		if _, err := fmt.Sscanf(string(r.Key), "row%d", &row); err != nil {
			return fmt.Errorf("unexpected row %q", r.Key)
		}
		cells := map[int64]int{}
		for _, c := range r.Cells {
			var col int
			if _, err := fmt.Sscanf(string(c.Qualifier), "c%d", &col); err != nil || c.Family != Family {
				return fmt.Errorf("row %q: unexpected column %s:%s", r.Key, c.Family, c.Qualifier)
			}
			if !bytes.Equal(c.Value, Value(c.Timestamp, col)) {
				return fmt.Errorf("row %q column c%d ts %d: wrong value %q", r.Key, col, c.Timestamp, c.Value)
			}
			cells[c.Timestamp]++
		}
		present[row] = cells
		return nil
	})
	if err != nil {
		t.Fatalf("run %d: scan: %v", run, err)
	}
	for row, cells := range present {
		for ts, n := range cells {
			o := h.byTS[ts]
			if o == nil || !containsOp(h.ops[row], o) {
				t.Fatalf("run %d: row %d holds timestamp %d that was never written to it", run, row, ts)
			}
			if n != Columns {
				t.Fatalf("run %d: row %d timestamp %d is half-applied: %d of %d cells", run, row, ts, n, Columns)
			}
		}
	}
	for row, ops := range h.ops {
		// mayDelete[i]: some row delete after op i may have been applied.
		// A delete may have been applied when it was acknowledged, when
		// its own cells are there, or when a later delete may have wiped
		// them.
		mayDelete := make([]bool, len(ops))
		later := false
		for i := len(ops) - 1; i >= 0; i-- {
			mayDelete[i] = later
			o := ops[i]
			if o.del && (o.acked || present[row][o.ts] > 0 || later) {
				later = true
			}
		}
		for i, o := range ops {
			if o.acked && present[row][o.ts] != Columns && !mayDelete[i] {
				t.Fatalf("run %d: acknowledged write lost: row %d timestamp %d (tried in run %d)", run, row, o.ts, o.run)
			}
		}
		// Nothing older than an applied row delete survives.
		for j, o := range ops {
			if !o.del || (!o.acked && present[row][o.ts] == 0) {
				continue
			}
			for _, earlier := range ops[:j] {
				if present[row][earlier.ts] > 0 {
					t.Fatalf("run %d: row %d timestamp %d survived the row delete at %d", run, row, earlier.ts, o.ts)
				}
			}
		}
	}
}

func containsOp(ops []*op, o *op) bool {
	for _, x := range ops {
		if x == o {
			return true
		}
	}
	return false
}

// TestKill9DuringWrites kills the writer subprocess at random moments, at
// least 20 times (200 with TABULA_LONG=1), and checks the reopened tablet
// after every kill.
func TestKill9DuringWrites(t *testing.T) {
	kills := 20
	if os.Getenv("TABULA_LONG") != "" {
		kills = 200
	}
	dir := t.TempDir()
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 0))
	h := newHistory()
	for run := 1; run <= kills; run++ {
		out := runAndKill(t, dir, int64(run)*1_000_000_000, seed+uint64(run), time.Duration(30+r.IntN(400))*time.Millisecond)
		h.record(t, run, out)
		h.verify(t, dir, run)
	}
	t.Logf("%d kills, %d row mutations tried, %d acknowledged", kills, h.tries, h.acks)
	if h.acks < kills*10 {
		t.Fatalf("only %d acknowledged writes in %d runs: the writer barely ran", h.acks, kills)
	}
}

// runAndKill starts the writer, lets it write for d after it is ready,
// kills it with SIGKILL and returns everything it printed.
func runAndKill(t *testing.T, dir string, base int64, seed uint64, d time.Duration) []byte {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(),
		"TABULA_CRASH_DIR="+dir,
		fmt.Sprintf("TABULA_CRASH_BASE=%d", base),
		fmt.Sprintf("TABULA_CRASH_SEED=%d", seed))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	done := make(chan error, 1)
	ready := make(chan struct{})
	go func() {
		br := bufio.NewReader(stdout)
		first, err := br.ReadString('\n')
		out.WriteString(first)
		if err == nil && first == "ready\n" {
			close(ready)
		}
		_, err = io.Copy(&out, br)
		done <- err
	}()
	select {
	case <-ready:
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("writer not ready after 60s; stderr:\n%s", stderr.String())
	case err := <-done:
		cmd.Wait()
		t.Fatalf("writer exited before ready (%v); stderr:\n%s", err, stderr.String())
	}
	time.Sleep(d)
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-done
	err = cmd.Wait()
	if ws, ok := cmd.ProcessState.Sys().(interface{ Signaled() bool }); !ok || !ws.Signaled() {
		t.Fatalf("writer ended by itself before the kill (%v); stderr:\n%s", err, stderr.String())
	}
	return out.Bytes()
}
