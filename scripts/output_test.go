package scripts

import (
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"github.com/tabuladb/tabula/storage/cell"
)

// allKinds declares one table of each kind and emits known values into it.
const allKinds = `
	c: table collection of {name: string, n: int};
	s: table sum[k: string] of int;
	f: table sum of float;
	mn: table mean of int;
	mx: table maximum(2) of url: string weight size: int;
	mi: table minimum(1)[k: int] of string weight float;
	tp: table top(2) of string;
	u: table unique(100) of int;
	q: table quantile(3) of int;
	sa: table sample(5) of int;
	for (i: int = 1; i <= 4; i++) {
		emit c <- {"r" + string(i), i};
		emit s["a"] <- i;
		emit s["b"] <- 10 * i;
		emit f <- float(i) / 2.0;
		emit mn <- i;
		emit mx <- "u" + string(i) weight i * i;
		emit mi[i % 2] <- "v" + string(i) weight float(i);
		emit tp <- "w" + string(i % 2);
		emit u <- i % 3;
		emit q <- i * 100;
		emit sa <- i;
	}
`

// TestJSONOutput checks the JSON shape the issue specifies: an object
// mapping each table, in declaration order, to entries {"key", "value"};
// key [] when unindexed; value a number for sum, unique and mean, an array
// for the others.
func TestJSONOutput(t *testing.T) {
	p := mustCompile(t, allKinds)
	r := p.NewRun(Limits{})
	if _, err := r.Process(testRow); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(r.Result())
	if err != nil {
		t.Fatal(err)
	}
	// sample is random: check it apart.
	var all map[string]json.RawMessage
	if err := json.Unmarshal(b, &all); err != nil {
		t.Fatal(err)
	}
	var sample []struct {
		Key   []any   `json:"key"`
		Value []int64 `json:"value"`
	}
	if err := json.Unmarshal(all["sa"], &sample); err != nil || len(sample) != 1 || len(sample[0].Value) != 4 {
		t.Errorf("sample: %s (%v)", all["sa"], err)
	}
	got := string(b)
	got = got[:strings.Index(got, `,"sa":`)] + "}"
	want := `{` +
		`"c":[{"key":[],"value":[{"n":1,"name":"r1"},{"n":2,"name":"r2"},{"n":3,"name":"r3"},{"n":4,"name":"r4"}]}],` +
		`"s":[{"key":["a"],"value":10},{"key":["b"],"value":100}],` +
		`"f":[{"key":[],"value":5}],` +
		`"mn":[{"key":[],"value":2.5}],` +
		`"mx":[{"key":[],"value":[{"size":16,"url":"u4"},{"size":9,"url":"u3"}]}],` +
		`"mi":[{"key":[0],"value":[{"value":"v2","weight":2}]},{"key":[1],"value":[{"value":"v1","weight":1}]}],` +
		`"tp":[{"key":[],"value":[{"value":"w0","weight":2},{"value":"w1","weight":2}]}],` +
		`"u":[{"key":[],"value":3}],` +
		// DDSketch's median of 100..400 is the lower middle value, 200,
		// within its 1% relative error; the ends are exact.
		`"q":[{"key":[],"value":[100,198,400]}]` +
		`}`
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

// TestTextOutput checks the readable output.
func TestTextOutput(t *testing.T) {
	got := runText(t, `
		s: table sum[k: string][n: int] of int;
		mx: table maximum(2) of string weight int;
		c: table collection of bytes;
		emit s["a"][1] <- 2;
		emit mx <- "x" weight 3;
		emit c <- B"\x00z";`, testRow)
	want := "s[\"a\"][1] = 2\nmx = \"x\" weight 3\nc = B\"\\x00z\"\n"
	if got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

// TestGoValues checks the typed results of the Go API.
func TestGoValues(t *testing.T) {
	p := mustCompile(t, allKinds)
	r := p.NewRun(Limits{})
	if _, err := r.Process(testRow); err != nil {
		t.Fatal(err)
	}
	res := r.Result()
	if v := res.Table("s").Entries[1]; v.Key[0] != "b" || v.Value != int64(100) {
		t.Errorf("s entry: %+v", v)
	}
	if v := res.Table("mn").Entries[0].Value; v != 2.5 {
		t.Errorf("mean: %v", v)
	}
	mx := res.Table("mx").Entries[0].Value.([]any)
	if first := mx[0].(map[string]any); first["url"] != "u4" || first["size"] != int64(16) {
		t.Errorf("maximum: %v", mx)
	}
	if res.Table("nope") != nil {
		t.Error("Table of an unknown name is not nil")
	}
}

// TestConcurrentRuns runs one program in several goroutines at once: a
// Program is shared, each Run is private.
func TestConcurrentRuns(t *testing.T) {
	p := webtableProgram(t)
	rows := webtableRows(200, 5)
	want := expectedWebtable(rows)
	var wg sync.WaitGroup
	results := make([]*Result, 4)
	for g := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := p.NewRun(Limits{})
			for _, row := range rows {
				if _, err := r.Process(row); err != nil {
					t.Error(err)
					return
				}
			}
			results[g] = r.Result()
		}()
	}
	wg.Wait()
	for _, res := range results {
		if res != nil {
			checkWebtable(t, res, want)
		}
	}
}

// TestInputKeyOnly checks a script that never reads the cells (so they are
// not built) still sees the key.
func TestInputKeyOnly(t *testing.T) {
	got := runText(t, `t: table collection of bytes; emit t <- input.key[0:3];`, testRow, cell.Row{Key: []byte("xyz1")})
	if got != "t = B\"com\"\nt = B\"xyz\"\n" {
		t.Errorf("got %q", got)
	}
}
