package faultcampaign

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func sampleResult() *Result {
	s := time.Second
	return &Result{
		Start: time.Date(2026, 11, 25, 19, 0, 0, 0, time.UTC), Duration: 60 * s,
		Events: []Event{
			{Client: 0, Worker: "official-1", Row: "a0", In: Input{Kind: OpIncr}, Out: Output{N: 1}, Call: 1 * s, Return: 1*s + 5*time.Millisecond},
			{Client: 1, Worker: "tabula-1", Row: "a0", In: Input{Kind: OpPut, Value: "<script>x</script>"}, Call: 2 * s, Return: 3 * s},
			{Client: 2, Worker: "tabula-2", Row: "a1", In: Input{Kind: OpAppend, Value: "/t"}, Out: Output{Unknown: true}, Call: 4 * s, Return: -1, Err: "deadline"},
			{Client: 3, Worker: "official-2", Row: "a1", In: Input{Kind: OpRead}, Failed: true, Call: 5 * s, Return: 6 * s, Err: "unavailable"},
		},
		Faults: []Fault{
			{Kind: KillServer, Target: "tabletserver-1", Start: 10 * s, Healed: 12 * s, End: 30 * s, Unavailable: 7 * s, Waited: 4 * s},
			{Kind: PauseMinIO, Target: "minio", Start: 30 * s, Healed: 35 * s, End: 60 * s, Unavailable: 5 * s, Err: "boom"},
		},
		Anomalies: []string{"row a1: <b>bad</b>"},
	}
}

func TestSummarize(t *testing.T) {
	s := sampleResult().Summarize()
	if s.Ops != 4 || s.OK != 2 || s.Unknown != 1 || s.Failed != 1 || s.Faults != 2 || s.Anomalies != 1 {
		t.Fatalf("summary %+v", s)
	}
	for _, k := range s.Kinds {
		switch k.Kind {
		case KillServer:
			if k.Count != 1 || k.WorstUnavail != 7*time.Second || k.WorstWait != 4*time.Second || k.WorstWaitSec != "4.0 s" {
				t.Errorf("kill-server: %+v", k)
			}
		case PauseMinIO:
			if k.Count != 1 || k.Errors != 1 {
				t.Errorf("pause-minio: %+v", k)
			}
		case MergeTablets:
			if k.Count != 0 || k.Skipped != "" {
				t.Errorf("merge: %+v, want listed with no fault", k)
			}
		}
	}
}

// The page escapes what it shows and carries the figures, a band per
// fault and a dot per operation.
func TestWriteHTML(t *testing.T) {
	r := sampleResult()
	var b bytes.Buffer
	if err := r.WriteHTML(&b); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	for _, want := range []string{`<td id="ops">4</td>`, `<td id="faults">2</td>`, `<td id="anomalies">1</td>`, "FAILED",
		"&lt;b&gt;bad&lt;/b&gt;", `data-kind="kill-server"`, `data-kind="merge"`, "<td>7.0 s</td><td>4.0 s</td>"} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %s", want)
		}
	}
	if strings.Contains(page, "<script>x") || strings.Contains(page, "<b>bad") {
		t.Error("page does not escape an operation's value or an anomaly")
	}
	if got := strings.Count(page, `<rect class="fault"`); got != 2 {
		t.Errorf("%d fault bands, want 2", got)
	}
	if got := strings.Count(page, "<circle "); got != 4 {
		t.Errorf("%d operation dots, want 4", got)
	}
	var txt bytes.Buffer
	r.WriteText(&txt)
	for _, want := range []string{"4 operations (2 ok, 1 failed, 1 unknown outcome)", "faults: 2; anomalies: 1", "kill-server           1       0 7.0 s", "merge                 0       0 0.0 s"} {
		if !strings.Contains(txt.String(), want) {
			t.Errorf("text summary lacks %q:\n%s", want, txt.String())
		}
	}
}

// A long campaign's timeline is sampled: at most about maxDots dots,
// every operation's when there are fewer.
func TestWriteHTMLSamplesLongTimelines(t *testing.T) {
	for _, n := range []int{maxDots, maxDots + 1, 2*maxDots + 1, 53512} {
		r := sampleResult()
		ev := r.Events[0]
		r.Events = make([]Event, n)
		for i := range r.Events {
			r.Events[i] = ev
		}
		var b bytes.Buffer
		if err := r.WriteHTML(&b); err != nil {
			t.Fatal(err)
		}
		got := strings.Count(b.String(), "<circle ")
		if got != timelineDots(n) || got > maxDots+maxDots/2 || (n <= maxDots && got != n) {
			t.Errorf("%d operations: %d dots, timelineDots says %d", n, got, timelineDots(n))
		}
	}
}

func TestLongestGap(t *testing.T) {
	s := time.Second
	evs := []Event{{Return: 1 * s}, {Return: 2 * s}, {Return: 9 * s}, {Return: 10 * s}, {Return: 4 * s, Failed: true}}
	if g := longestGap(evs, 1500*time.Millisecond, 11*s); g != 7*s {
		t.Errorf("gap %v, want 7s (2 s to 9 s)", g)
	}
	if g := longestGap(evs, 0, 20*s); g != 10*s {
		t.Errorf("gap %v, want 10s (the window's end after the last success)", g)
	}
}

// A library whose every worker stalls is found although the other
// library keeps every row going.
func TestClientStall(t *testing.T) {
	s := time.Second
	evs := []Event{
		{Worker: "official-1", Row: "a0", Call: 900 * time.Millisecond, Return: 1 * s},
		{Worker: "tabula-1", Row: "a0", Call: 2 * s, Return: 2 * s},
		{Worker: "official-2", Row: "a1", Call: 2 * s, Return: 6 * s, Failed: true},
		{Worker: "tabula-2", Row: "a1", Call: 3 * s, Return: 3 * s},
		{Worker: "tabula-1", Row: "a0", Call: 5 * s, Return: 5 * s},
		{Worker: "official-1", Row: "a0", Call: 8 * s, Return: 8 * s},
		{Worker: "final", Row: "a0", Call: 9 * s, Return: 9 * s},
	}
	libs := ByLibrary(evs)
	if len(libs) != 2 || len(libs["official"]) != 3 || len(libs["tabula"]) != 3 {
		t.Fatalf("ByLibrary: %v", libs)
	}
	if stall, lib := clientStall(libs, 1500*time.Millisecond, 9*s); stall != 6500*time.Millisecond || lib != "official" {
		t.Errorf("stall %v of %q, want 6.5s of official (1.5 s to 8 s)", stall, lib)
	}
	if stall, lib := clientStall(libs, 8*s, 8500*time.Millisecond); stall != 500*time.Millisecond || lib != "official" {
		t.Errorf("every library idle: stall %v of %q, want 0.5s of the first by name", stall, lib)
	}
}

func TestLongestWait(t *testing.T) {
	s := time.Second
	ms := time.Millisecond
	evs := []Event{
		{Call: 900 * ms, Return: 1 * s},
		// The row goes down at 2 s: the first caller after it fails at
		// its deadline, the next one is retried by the client until the
		// row is back and succeeds at 9 s.
		{Call: 2 * s, Return: 6 * s, Failed: true},
		{Call: 6500 * ms, Return: 9 * s},
		// Nobody asks between 9 s and 15 s: longestGap counts it, a
		// caller did not wait.
		{Call: 15 * s, Return: 15100 * ms},
		// An unknown outcome at 16 s; a later caller succeeds at 18 s.
		{Call: 16 * s, Return: -1, Out: Output{Unknown: true}},
		{Call: 17500 * ms, Return: 18 * s},
		// The final read is not a caller.
		{Call: 25 * s, Return: 25 * s, Worker: "final"},
	}
	if w := longestWait(evs, 1500*ms, 15*s); w != 7*s {
		t.Errorf("wait %v, want 7s (called at 2 s, the next success called after it returned at 9 s)", w)
	}
	if w, g := longestWait(evs, 8*s, 15*s), longestGap(evs, 8*s, 15*s); w != 0 || g != 6*s {
		t.Errorf("wait %v and gap %v, want 0 (no caller called in the window) and 6s (9 s to the window's end)", w, g)
	}
	if w := longestWait(evs, 10*s, 20*s); w != 2*s {
		t.Errorf("wait %v, want 2s (called at 16 s, answered at 18 s)", w)
	}
	// A caller no success follows before the window's end waits to it.
	if w := longestWait(evs[:2], 1500*ms, 12*s); w != 10*s {
		t.Errorf("wait %v, want 10s (called at 2 s, nothing by 12 s)", w)
	}
	// A success called before a caller does not answer it, even if it
	// returns after the caller's call: the caller's request did not get
	// through.
	slow := []Event{{Call: 0, Return: 5 * s}, {Call: 1 * s, Return: 2 * s, Failed: true}, {Call: 3 * s, Return: 4 * s}}
	if w := longestWait(slow, 0, 10*s); w != 5*s {
		t.Errorf("wait %v, want 5s (the slow success's own latency)", w)
	}
	if w := longestWait(nil, 0, 10*s); w != 0 {
		t.Errorf("wait %v with no callers, want 0", w)
	}
}
