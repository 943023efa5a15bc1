package sched

import (
	"errors"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// harness drives a Scheduler and keeps the attempts it started.
type harness struct {
	t       *testing.T
	s       *Scheduler
	now     time.Time
	started []Start
	acts    []Action
}

func newHarness(t *testing.T, cfg Config, workers ...WorkerJoined) *harness {
	h := &harness{t: t, s: New(cfg), now: t0}
	for _, w := range workers {
		h.step(w)
	}
	return h
}

func (h *harness) step(ev Event) []Action {
	acts := h.s.Step(h.now, ev)
	for _, a := range acts {
		if st, ok := a.(Start); ok {
			h.started = append(h.started, st)
		}
	}
	h.acts = append(h.acts, acts...)
	return acts
}

func (h *harness) advance(d time.Duration) { h.now = h.now.Add(d) }

// running returns the attempts started and not yet reported ended.
func (h *harness) startedOf(task TaskID) []Start {
	var out []Start
	for _, s := range h.started {
		if s.Attempt.Task == task {
			out = append(out, s)
		}
	}
	return out
}

func find[T Action](acts []Action) []T {
	var out []T
	for _, a := range acts {
		if x, ok := a.(T); ok {
			out = append(out, x)
		}
	}
	return out
}

func m(i int) TaskID { return TaskID{Map, i} }
func r(i int) TaskID { return TaskID{Reduce, i} }

// TestHappyPathLocality: maps go to workers on their hosts first; reduces
// start only when every map is committed, told where each map output is;
// the job ends when every reduce is committed.
func TestHappyPathLocality(t *testing.T) {
	h := newHarness(t, Config{MapHosts: []string{"b", "a", "b"}, Reducers: 2},
		WorkerJoined{Name: "wa", Host: "a", Slots: 1}, WorkerJoined{Name: "wb", Host: "b", Slots: 1})
	if len(h.started) != 2 {
		t.Fatalf("started %v, want 2 (one per slot)", h.started)
	}
	want := map[TaskID]string{m(0): "wb", m(1): "wa"}
	for _, s := range h.started {
		if want[s.Attempt.Task] != s.Worker {
			t.Errorf("%v on %s, want on %s (locality)", s.Attempt, s.Worker, want[s.Attempt.Task])
		}
	}
	h.advance(time.Second)
	acts := h.step(AttemptSucceeded{AttemptID{m(0), 0}})
	if c := find[Commit](acts); len(c) != 1 || c[0].Worker != "wb" {
		t.Fatalf("commit actions %v", acts)
	}
	if st := find[Start](acts); len(st) != 1 || st[0].Attempt.Task != m(2) || st[0].Worker != "wb" {
		t.Fatalf("after map 0, want map 2 on wb: %v", acts)
	}
	h.step(AttemptSucceeded{AttemptID{m(1), 0}})
	if n := len(find[Start](h.acts)); n != 3 {
		t.Fatalf("reduces started before every map was done: %v", h.started)
	}
	acts = h.step(AttemptSucceeded{AttemptID{m(2), 0}})
	st := find[Start](acts)
	if len(st) != 2 || st[0].Attempt.Task.Kind != Reduce {
		t.Fatalf("want both reduces started: %v", acts)
	}
	wantOut := []MapOutput{{0, AttemptID{m(0), 0}, "wb"}, {1, AttemptID{m(1), 0}, "wa"}, {2, AttemptID{m(2), 0}, "wb"}}
	for i, o := range st[0].MapOutputs {
		if o != wantOut[i] {
			t.Errorf("map output %d = %+v, want %+v", i, o, wantOut[i])
		}
	}
	h.step(AttemptSucceeded{st[0].Attempt})
	acts = h.step(AttemptSucceeded{st[1].Attempt})
	if len(find[JobDone](acts)) != 1 || !h.s.Over() {
		t.Fatalf("job not done: %v", acts)
	}
}

// TestTaskFailsJobAfterMaxAttempts: a task whose every attempt fails is
// retried on another worker, and the fourth failure fails the job naming
// the task and its error, killing what still runs.
func TestTaskFailsJobAfterMaxAttempts(t *testing.T) {
	h := newHarness(t, Config{MapHosts: []string{"", ""}, Reducers: 1},
		WorkerJoined{Name: "w1", Slots: 2}, WorkerJoined{Name: "w2", Slots: 2})
	boom := errors.New("boom: bad row")
	var last []Action
	for i := range 4 {
		att := h.startedOf(m(1))
		if len(att) != i+1 {
			t.Fatalf("after %d failures, %d attempts of map 1", i, len(att))
		}
		if i == 1 && att[1].Worker == att[0].Worker {
			t.Errorf("attempt %d on %s again, the worker it just failed on", i, att[i].Worker)
		}
		last = h.step(AttemptFailed{Attempt: att[i].Attempt, Err: boom, FetchFailedMap: -1})
	}
	jf := find[JobFailed](last)
	if len(jf) != 1 || !errors.Is(jf[0].Err, boom) || !strings.Contains(jf[0].Err.Error(), "map 1 failed 4 times") {
		t.Fatalf("want the job failed naming map 1 and boom, got %v", last)
	}
	if k := find[Kill](last); len(k) != 1 || k[0].Attempt.Task != m(0) {
		t.Errorf("want map 0's running attempt killed: %v", last)
	}
	if h.s.Failed != 4 {
		t.Errorf("Failed = %d, want 4", h.s.Failed)
	}
	// Events after the end change nothing.
	if acts := h.step(AttemptSucceeded{AttemptID{m(0), 0}}); len(find[Start](acts))+len(find[Commit](acts)) != 0 {
		t.Errorf("actions after the job failed: %v", acts)
	}
}

// TestLostWorkerRerunsMaps: a lost worker's running attempt and its
// committed map output (needed by reduces) are re-run on the survivor,
// without counting as failures; the reduce is told the new location.
func TestLostWorkerRerunsMaps(t *testing.T) {
	h := newHarness(t, Config{MapHosts: []string{"", ""}, Reducers: 1},
		WorkerJoined{Name: "w1", Slots: 1}, WorkerJoined{Name: "w2", Slots: 1})
	s0, s1 := h.startedOf(m(0))[0], h.startedOf(m(1))[0]
	if s0.Worker != "w1" || s1.Worker != "w2" {
		t.Fatalf("placement %v %v", s0, s1)
	}
	h.step(AttemptSucceeded{s0.Attempt}) // map 0 committed on w1
	acts := h.step(WorkerLost{Name: "w1"})
	if st := find[Start](acts); len(st) != 0 {
		t.Fatalf("w2 is busy; nothing should start: %v", acts)
	}
	acts = h.step(AttemptSucceeded{s1.Attempt})
	st := find[Start](acts)
	if len(st) != 1 || st[0].Attempt != (AttemptID{m(0), 1}) || st[0].Worker != "w2" {
		t.Fatalf("want map 0 re-run on w2: %v", acts)
	}
	acts = h.step(AttemptSucceeded{st[0].Attempt})
	st = find[Start](acts)
	if len(st) != 1 || st[0].Attempt.Task != r(0) || st[0].MapOutputs[0].Worker != "w2" {
		t.Fatalf("want reduce with map 0 on w2: %v", acts)
	}
	// A late report from the lost worker's attempt is ignored.
	if acts := h.step(AttemptFailed{Attempt: s0.Attempt, Err: errors.New("conn reset"), FetchFailedMap: -1}); len(acts) != 0 {
		t.Errorf("late failure acted on: %v", acts)
	}
	if h.s.Failed != 0 {
		t.Errorf("Failed = %d, want 0 (lost workers do not count)", h.s.Failed)
	}
	if acts := h.step(AttemptSucceeded{st[0].Attempt}); len(find[JobDone](acts)) != 1 {
		t.Errorf("job not done: %v", acts)
	}
}

// TestLostWorkerMapOnlyKeepsCommitted: a map-only job's committed maps
// wrote the job output; losing their worker re-runs nothing.
func TestLostWorkerMapOnlyKeepsCommitted(t *testing.T) {
	h := newHarness(t, Config{MapHosts: []string{"", ""}},
		WorkerJoined{Name: "w1", Slots: 1}, WorkerJoined{Name: "w2", Slots: 1})
	h.step(AttemptSucceeded{AttemptID{m(0), 0}})
	h.step(WorkerLost{Name: "w1"})
	acts := h.step(AttemptSucceeded{AttemptID{m(1), 0}})
	if len(find[JobDone](acts)) != 1 || len(h.started) != 2 {
		t.Fatalf("want done without re-runs: started %v, acts %v", h.started, acts)
	}
}

// TestSpeculation: once no map is pending, an attempt running SlowFactor
// times the median gets a backup on another worker; the backup wins, the
// original is killed and its end counts as killed; a second success of
// a task is discarded.
func TestSpeculation(t *testing.T) {
	h := newHarness(t, Config{MapHosts: []string{"", "", "", ""}, Speculation: true, MinBackupAge: time.Second},
		WorkerJoined{Name: "w1", Slots: 2}, WorkerJoined{Name: "w2", Slots: 2})
	h.advance(time.Second)
	for _, i := range []int{0, 1, 2} {
		h.step(AttemptSucceeded{AttemptID{m(i), 0}})
	}
	h.advance(500 * time.Millisecond)
	if st := find[Start](h.step(Tick{})); len(st) != 0 {
		t.Fatalf("backup before the straggler is slow: %v", st)
	}
	h.advance(2 * time.Second) // map 3 at 3.5 s, median 1 s
	st := find[Start](h.step(Tick{}))
	orig := h.startedOf(m(3))[0]
	if len(st) != 1 || !st[0].Speculative || st[0].Attempt != (AttemptID{m(3), 1}) || st[0].Worker == orig.Worker {
		t.Fatalf("want a backup of map 3 on the other worker, got %v (original on %s)", st, orig.Worker)
	}
	if st := find[Start](h.step(Tick{})); len(st) != 0 {
		t.Fatalf("second backup: %v", st)
	}
	acts := h.step(AttemptSucceeded{st[0].Attempt})
	if c, k := find[Commit](acts), find[Kill](acts); len(c) != 1 || c[0].Attempt != st[0].Attempt || len(k) != 1 || k[0].Attempt != orig.Attempt {
		t.Fatalf("want backup committed and original killed: %v", acts)
	}
	if len(find[JobDone](acts)) != 1 {
		t.Fatalf("job not done: %v", acts)
	}
	h.step(AttemptFailed{Attempt: orig.Attempt, Err: errors.New("context canceled"), FetchFailedMap: -1})
	if h.s.Failed != 0 || h.s.Killed != 1 || h.s.Backups != 1 {
		t.Errorf("failed %d killed %d backups %d, want 0 1 1", h.s.Failed, h.s.Killed, h.s.Backups)
	}
}

// TestBothAttemptsSucceed: when the killed original succeeds anyway, its
// output is discarded; only the first commits.
func TestBothAttemptsSucceed(t *testing.T) {
	h := newHarness(t, Config{MapHosts: []string{"", ""}, Reducers: 1, Speculation: true, MinBackupAge: time.Second},
		WorkerJoined{Name: "w1", Slots: 1}, WorkerJoined{Name: "w2", Slots: 1})
	h.advance(time.Second)
	h.step(AttemptSucceeded{AttemptID{m(0), 0}})
	h.advance(5 * time.Second)
	st := find[Start](h.step(Tick{}))
	if len(st) != 1 || st[0].Attempt != (AttemptID{m(1), 1}) {
		t.Fatalf("no backup: %v", st)
	}
	h.step(AttemptSucceeded{AttemptID{m(1), 0}})
	acts := h.step(AttemptSucceeded{AttemptID{m(1), 1}})
	if d := find[Discard](acts); len(d) != 1 || d[0].Attempt != (AttemptID{m(1), 1}) {
		t.Fatalf("want the backup discarded: %v", acts)
	}
	commits := find[Commit](h.acts)
	n := 0
	for _, c := range commits {
		if c.Attempt.Task == m(1) {
			n++
		}
	}
	if n != 1 {
		t.Errorf("map 1 committed %d times", n)
	}
}

// TestFetchFailureRerunsMap: a reduce that cannot fetch map 0's output
// re-runs map 0 and is retried, without the failure counting against it.
func TestFetchFailureRerunsMap(t *testing.T) {
	h := newHarness(t, Config{MapHosts: []string{""}, Reducers: 1}, WorkerJoined{Name: "w1", Slots: 1})
	for i := range 6 { // more than MaxAttempts rounds
		maps := h.startedOf(m(0))
		h.step(AttemptSucceeded{maps[len(maps)-1].Attempt})
		red := h.startedOf(r(0))
		if len(red) != i+1 {
			t.Fatalf("round %d: %d reduce attempts", i, len(red))
		}
		acts := h.step(AttemptFailed{Attempt: red[i].Attempt, Err: errors.New("no such map output"), FetchFailedMap: 0})
		if len(find[JobFailed](acts)) != 0 {
			t.Fatalf("fetch failures failed the job: %v", acts)
		}
		if st := find[Start](acts); len(st) != 1 || st[0].Attempt.Task != m(0) {
			t.Fatalf("round %d: want map 0 re-run: %v", i, acts)
		}
	}
}

// TestFetchFailureFromLostWorkerIsKilled: a reduce that could not fetch a
// map output whose worker is known lost counts as killed, not failed, and
// the map re-runs once; reported before the loss is known, the fetch
// failure counts as failed (nothing explains it yet) and the map still
// ends up re-run on the worker left.
func TestFetchFailureFromLostWorkerIsKilled(t *testing.T) {
	for _, lostFirst := range []bool{true, false} {
		h := newHarness(t, Config{MapHosts: []string{"", ""}, Reducers: 1},
			WorkerJoined{Name: "w1", Slots: 1}, WorkerJoined{Name: "w2", Slots: 1})
		s0, s1 := h.startedOf(m(0))[0], h.startedOf(m(1))[0]
		h.step(AttemptSucceeded{s0.Attempt})
		h.step(AttemptSucceeded{s1.Attempt})
		red := h.startedOf(r(0))
		if len(red) != 1 {
			t.Fatalf("want the reduce started once both maps committed: %v", h.started)
		}
		// The worker lost is the one not running the reduce; the map
		// whose output the reduce misses is the one committed there.
		other := red[0].Worker
		lostMap, lostWorker := s0, s0.Worker
		if lostWorker == other {
			lostMap, lostWorker = s1, s1.Worker
		}
		var acts []Action
		fetchFailed := AttemptFailed{Attempt: red[0].Attempt, Err: errors.New("no such map output"), FetchFailedMap: lostMap.Attempt.Task.Index}
		if lostFirst {
			acts = append(acts, h.step(WorkerLost{Name: lostWorker})...)
			acts = append(acts, h.step(fetchFailed)...)
		} else {
			// The map's worker is not yet known lost: the output is
			// missing, the map re-runs, and the loss reported next
			// changes nothing more.
			acts = append(acts, h.step(fetchFailed)...)
			acts = append(acts, h.step(WorkerLost{Name: lostWorker})...)
		}
		if lostFirst && (h.s.Failed != 0 || h.s.Killed != 1) {
			t.Errorf("loss reported first: Failed %d, Killed %d; want 0 and 1", h.s.Failed, h.s.Killed)
		}
		if !lostFirst && h.s.Failed != 1 {
			t.Errorf("fetch failure from a worker not known lost: Failed %d, want 1", h.s.Failed)
		}
		st := find[Start](acts)
		if len(st) == 0 || st[len(st)-1].Attempt.Task != lostMap.Attempt.Task || st[len(st)-1].Worker != other {
			t.Errorf("lost first %v: want %s re-run on %s: %v", lostFirst, lostMap.Attempt.Task, other, st)
		}
		if lostFirst && len(st) != 1 {
			t.Errorf("loss reported first: want one re-run of %s: %v", lostMap.Attempt.Task, st)
		}
	}
}

// TestNoWorkersLeft: losing every worker fails the job unless told to
// wait for more.
func TestNoWorkersLeft(t *testing.T) {
	h := newHarness(t, Config{MapHosts: []string{""}}, WorkerJoined{Name: "w1", Slots: 1})
	acts := h.step(WorkerLost{Name: "w1"})
	if jf := find[JobFailed](acts); len(jf) != 1 || !errors.Is(jf[0].Err, ErrNoWorkers) {
		t.Fatalf("want ErrNoWorkers: %v", acts)
	}
	h = newHarness(t, Config{MapHosts: []string{""}, WaitForWorkers: true}, WorkerJoined{Name: "w1", Slots: 1})
	if acts := h.step(WorkerLost{Name: "w1"}); len(acts) != 0 {
		t.Fatalf("want waiting: %v", acts)
	}
	acts = h.step(WorkerJoined{Name: "w2", Slots: 1})
	if st := find[Start](acts); len(st) != 1 || st[0].Worker != "w2" {
		t.Fatalf("want map 0 on the new worker: %v", acts)
	}
}

// TestEmptyJob: a job without tasks is done at once.
func TestEmptyJob(t *testing.T) {
	h := newHarness(t, Config{}, WorkerJoined{Name: "w1", Slots: 1})
	if len(find[JobDone](h.acts)) != 1 {
		t.Fatalf("want done: %v", h.acts)
	}
}

// TestStopCountsRunningAttemptsKilled: a job stopped from outside (its
// context cancelled) with attempts running counts their reports, failed
// or succeeded, as kills, discards what they wrote, and starts nothing.
func TestStopCountsRunningAttemptsKilled(t *testing.T) {
	h := newHarness(t, Config{MapHosts: []string{"", "", ""}, Reducers: 1},
		WorkerJoined{Name: "w1", Slots: 2}, WorkerJoined{Name: "w2", Slots: 2})
	att := h.started
	if len(att) != 3 {
		t.Fatalf("%d attempts started, want the 3 maps", len(att))
	}
	h.s.Stop()
	if !h.s.Over() {
		t.Fatal("not over after Stop")
	}
	acts := h.step(AttemptFailed{Attempt: att[0].Attempt, Err: errors.New("context canceled"), FetchFailedMap: -1})
	acts = append(acts, h.step(AttemptSucceeded{att[1].Attempt})...)
	if len(find[Start](acts))+len(find[Commit](acts)) != 0 {
		t.Errorf("actions after Stop: %v", acts)
	}
	if d := find[Discard](acts); len(d) != 1 || d[0].Attempt != att[1].Attempt {
		t.Errorf("want the late success discarded: %v", acts)
	}
	if h.s.Failed != 0 || h.s.Killed != 2 {
		t.Errorf("failed %d killed %d, want 0 and 2", h.s.Failed, h.s.Killed)
	}
}
