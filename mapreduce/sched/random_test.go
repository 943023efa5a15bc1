package sched

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// TestRandomRuns drives the scheduler with random event sequences —
// attempts succeeding and failing (some as fetch failures), workers lost
// and joining, time passing — and checks its invariants after every step:
// attempts start only on live workers within their slots; a reduce starts
// only with every map's output committed on a live worker; a task commits
// at most once while its commit stands (a map again only after its output
// was lost); the job never stalls while a live worker could run something;
// it fails only for a task with MaxAttempts counted failures or for want of
// workers; and when done, every task is committed.
func TestRandomRuns(t *testing.T) {
	outcomes := map[string]int{}
	for seed := range uint64(400) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { outcomes[randomRun(t, seed)]++ })
	}
	// The runs must reach every ending, or they test less than they say.
	for _, o := range []string{"done", "failed", "backups", "rerun"} {
		if outcomes[o] == 0 {
			t.Errorf("no run %s: %v", o, outcomes)
		}
	}
	t.Logf("outcomes %v", outcomes)
}

type simAttempt struct {
	Start
	task TaskID
}

func randomRun(t *testing.T, seed uint64) (outcome string) {
	r := rand.New(rand.NewPCG(seed, 99))
	maps, reduces := 1+r.IntN(8), r.IntN(4)
	hosts := make([]string, maps)
	for i := range hosts {
		hosts[i] = fmt.Sprintf("h%d", r.IntN(3))
	}
	s := New(Config{MapHosts: hosts, Reducers: reduces, Speculation: r.IntN(2) == 0, MinBackupAge: time.Second})
	now := t0
	live := map[string]int{}  // worker → slots
	lost := map[string]bool{} // workers lost
	running := map[AttemptID]simAttempt{}
	committed := map[TaskID]Commit{}  // standing commits
	failures := map[TaskID]int{}      // counted failures we caused
	reduceCommits := map[TaskID]int{} // ever
	ever := map[TaskID]bool{}         // committed at least once
	reran := false                    // a task committed again (its output was lost)
	nextWorker := 0
	over, done := false, false
	var failErr error

	apply := func(ev Event) {
		acts := s.Step(now, ev)
		for _, a := range acts {
			switch a := a.(type) {
			case Start:
				if over {
					t.Fatalf("start after the end: %v", a)
				}
				if _, ok := live[a.Worker]; !ok {
					t.Fatalf("%v started on worker %s, which is not live", a.Attempt, a.Worker)
				}
				n := 0
				for _, ra := range running {
					if ra.Worker == a.Worker {
						n++
					}
				}
				if n >= live[a.Worker] {
					t.Fatalf("%v started on %s with %d of %d slots busy", a.Attempt, a.Worker, n, live[a.Worker])
				}
				if a.Attempt.Task.Kind == Reduce {
					if len(a.MapOutputs) != maps {
						t.Fatalf("reduce started with %d map outputs, want %d", len(a.MapOutputs), maps)
					}
					for _, mo := range a.MapOutputs {
						c, ok := committed[TaskID{Map, mo.Map}]
						if !ok || c.Attempt != mo.Attempt || lost[mo.Worker] {
							t.Fatalf("reduce started with map output %+v not standing (commit %+v)", mo, c)
						}
					}
				}
				running[a.Attempt] = simAttempt{Start: a, task: a.Attempt.Task}
			case Commit:
				if ever[a.Attempt.Task] {
					reran = true
				}
				ever[a.Attempt.Task] = true
				if c, ok := committed[a.Attempt.Task]; ok {
					t.Fatalf("%v committed while %v stands", a.Attempt, c.Attempt)
				}
				committed[a.Attempt.Task] = a
				if a.Attempt.Task.Kind == Reduce {
					reduceCommits[a.Attempt.Task]++
					if reduceCommits[a.Attempt.Task] > 1 {
						t.Fatalf("reduce %v committed twice", a.Attempt.Task)
					}
				}
			case Kill:
			case Discard:
			case JobDone:
				over, done = true, true
			case JobFailed:
				over, failErr = true, a.Err
			}
		}
	}
	join := func() {
		name := fmt.Sprintf("w%d", nextWorker)
		nextWorker++
		live[name] = 1 + r.IntN(2)
		apply(WorkerJoined{Name: name, Host: fmt.Sprintf("h%d", r.IntN(3)), Slots: live[name]})
	}
	for range 1 + r.IntN(3) {
		join()
	}
	for step := 0; !over; step++ {
		if step > 10000 {
			t.Fatal("no end after 10000 steps")
		}
		if len(running) == 0 {
			t.Fatalf("stalled: not over, nothing running, live workers %v", live)
		}
		now = now.Add(time.Duration(r.IntN(1500)) * time.Millisecond)
		var ids []AttemptID
		for id := range running {
			ids = append(ids, id)
		}
		// A deterministic pick: the map's iteration order is random.
		slicesSortAttempts(ids)
		id := ids[r.IntN(len(ids))]
		ra := running[id]
		switch x := r.IntN(100); {
		case x < 70:
			delete(running, id)
			apply(AttemptSucceeded{Attempt: id})
		case x < 85:
			delete(running, id)
			fetch := -1
			if id.Task.Kind == Reduce && r.IntN(2) == 0 && maps > 0 {
				fetch = r.IntN(maps)
				// The map's output is gone: its commit no longer stands.
				delete(committed, TaskID{Map, fetch})
			} else if !lost[ra.Worker] {
				if _, isCommitted := committed[id.Task]; !isCommitted {
					failures[id.Task]++
				}
			}
			apply(AttemptFailed{Attempt: id, Err: errors.New("boom"), FetchFailedMap: fetch})
		case x < 90 && len(live) > 1:
			// Lose the attempt's worker: its attempts end, its map
			// outputs no longer stand.
			w := ra.Worker
			delete(live, w)
			lost[w] = true
			for aid, a := range running {
				if a.Worker == w {
					delete(running, aid)
				}
			}
			for tid, c := range committed {
				// A map-only job's maps wrote the job output: it stands.
				if c.Worker == w && tid.Kind == Map && reduces > 0 {
					delete(committed, tid)
				}
			}
			apply(WorkerLost{Name: w})
			if r.IntN(2) == 0 {
				join()
			}
		case x < 95:
			apply(Tick{})
		default:
			join()
		}
	}
	defer func() {
		if outcome == "done" && s.Backups > 0 {
			outcome = "backups"
		}
		if outcome == "done" && reran {
			outcome = "rerun"
		}
	}()
	if done {
		for i := range reduces {
			if reduceCommits[TaskID{Reduce, i}] != 1 {
				t.Fatalf("done with reduce %d committed %d times", i, reduceCommits[TaskID{Reduce, i}])
			}
		}
		if reduces == 0 {
			for i := range maps {
				if _, ok := committed[TaskID{Map, i}]; !ok {
					t.Fatalf("map-only job done without map %d committed", i)
				}
			}
		}
		return "done"
	}
	if errors.Is(failErr, ErrNoWorkers) {
		return "no workers"
	}
	worst := 0
	for _, n := range failures {
		worst = max(worst, n)
	}
	if worst < 4 {
		t.Fatalf("job failed (%v) with at most %d counted failures of a task", failErr, worst)
	}
	return "failed"
}

func slicesSortAttempts(ids []AttemptID) {
	for i := 1; i < len(ids); i++ {
		for j := i; j > 0 && less(ids[j], ids[j-1]); j-- {
			ids[j], ids[j-1] = ids[j-1], ids[j]
		}
	}
}

func less(a, b AttemptID) bool {
	if a.Task.Kind != b.Task.Kind {
		return a.Task.Kind < b.Task.Kind
	}
	if a.Task.Index != b.Task.Index {
		return a.Task.Index < b.Task.Index
	}
	return a.Attempt < b.Attempt
}
