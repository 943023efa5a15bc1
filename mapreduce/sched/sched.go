// Package sched is the MapReduce scheduler as a pure state machine, in the
// manner of etcd's raft: the coordinator feeds it events (a worker joined
// or was lost, an attempt succeeded or failed, time passed) and carries
// out the actions it returns (start an attempt on a worker, kill one,
// commit or discard an attempt's output, end the job). It does no I/O and
// reads no clock, so every path — retries, lost workers, speculative
// backups, the race between an attempt and its backup — is tested by
// feeding it events.
//
// Rules:
//   - Maps run first; reduces start once every map has a committed output.
//   - A free slot takes a pending map whose locality hint is the worker's
//     host before any other; a retried task avoids the workers it failed on
//     when another has a free slot.
//   - A task whose attempts fail MaxAttempts times fails the job, naming the
//     task and its last error; failures of attempts that were killed (a
//     backup lost the race, the job ended) or whose worker was lost do not
//     count. A reduce that could not fetch a map's output does not count
//     either: that map is re-run. Such a reduce counts as killed when the
//     output was already known gone (its worker lost, or the map re-running
//     after an earlier fetch failure), as failed otherwise.
//   - A lost worker's running attempts end; its committed map outputs are
//     re-run while some reduce still needs them (map-only jobs commit
//     their output at once, and committed reduces are final).
//   - Once a phase has no pending task, a running attempt that has taken
//     SlowFactor times the phase's median completed duration (and at least
//     MinBackupAge) gets one backup attempt on another worker; the first to
//     succeed commits, the other is killed (or, if it also succeeded,
//     discarded).
//   - Exactly one attempt of each task commits (a map re-run after its
//     worker was lost commits again, replacing the lost output).
package sched

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"
)

// Kind is a task's phase.
type Kind int

const (
	Map Kind = iota
	Reduce
)

func (k Kind) String() string {
	if k == Reduce {
		return "reduce"
	}
	return "map"
}

// TaskID names a task.
type TaskID struct {
	Kind  Kind
	Index int
}

func (t TaskID) String() string { return fmt.Sprintf("%s %d", t.Kind, t.Index) }

// AttemptID names an attempt of a task (0, 1, … per task, backups
// included).
type AttemptID struct {
	Task    TaskID
	Attempt int
}

func (a AttemptID) String() string { return fmt.Sprintf("%s attempt %d", a.Task, a.Attempt) }

// Config is the job's shape and the scheduler's policy.
type Config struct {
	// MapHosts is each map task's locality hint (the host of the tablet
	// server holding its split; "" for none); its length is the number of
	// map tasks.
	MapHosts []string
	// Reducers is the number of reduce tasks (0: map-only job).
	Reducers int
	// MaxAttempts counted failures fail a task (and the job); default 4.
	MaxAttempts int
	// Speculation enables backup attempts; SlowFactor (default 2) and
	// MinBackupAge (default 2 s) say when an attempt is a straggler.
	Speculation  bool
	SlowFactor   float64
	MinBackupAge time.Duration
	// WaitForWorkers keeps the job waiting when every worker is lost (more
	// may join); otherwise it fails with ErrNoWorkers.
	WaitForWorkers bool
}

// ErrNoWorkers fails a job left without live workers.
var ErrNoWorkers = errors.New("no live workers left")

// Events.
type (
	// Event is one of the types below.
	Event interface{ event() }
	// WorkerJoined adds a worker with Slots concurrent attempts.
	WorkerJoined struct {
		Name, Host string
		Slots      int
	}
	// WorkerLost says a worker is gone with everything it held.
	WorkerLost struct{ Name string }
	// AttemptSucceeded: the attempt finished and its output awaits commit.
	AttemptSucceeded struct{ Attempt AttemptID }
	// AttemptFailed: the attempt ended with Err (also after a Kill).
	// FetchFailedMap, when ≥ 0, is the map whose output a reduce could not
	// fetch; set it to -1 otherwise.
	AttemptFailed struct {
		Attempt        AttemptID
		Err            error
		FetchFailedMap int
	}
	// Tick lets time pass (for speculation).
	Tick struct{}
)

func (WorkerJoined) event()     {}
func (WorkerLost) event()       {}
func (AttemptSucceeded) event() {}
func (AttemptFailed) event()    {}
func (Tick) event()             {}

// Actions.
type (
	// Action is one of the types below.
	Action interface{ action() }
	// Start runs an attempt on a worker. A reduce's MapOutputs say where
	// each map's committed output is.
	Start struct {
		Attempt     AttemptID
		Worker      string
		Speculative bool
		MapOutputs  []MapOutput
	}
	// Kill stops a running attempt (its end is still reported as
	// AttemptFailed, which then counts as killed).
	Kill struct {
		Attempt AttemptID
		Worker  string
		Reason  string
	}
	// Commit makes the attempt its task's output: the map output reducers
	// fetch, or the job output of a reduce or of a map-only job's map.
	Commit struct {
		Attempt AttemptID
		Worker  string
	}
	// Discard drops a succeeded attempt's output: its task had already
	// committed another.
	Discard struct {
		Attempt AttemptID
		Worker  string
	}
	// JobDone: every task committed; the job output may be committed.
	JobDone struct{}
	// JobFailed: the job cannot finish; running attempts were killed.
	JobFailed struct{ Err error }
)

func (Start) action()     {}
func (Kill) action()      {}
func (Commit) action()    {}
func (Discard) action()   {}
func (JobDone) action()   {}
func (JobFailed) action() {}

// MapOutput locates a map's committed output.
type MapOutput struct {
	Map     int
	Attempt AttemptID
	Worker  string
}

type attemptState int

const (
	running attemptState = iota
	killing
	succeeded
	failed
	killed
)

type attempt struct {
	id      AttemptID
	worker  string
	started time.Time
	state   attemptState
	backup  bool
}

type task struct {
	id        TaskID
	host      string
	attempts  []*attempt
	failures  int
	lastErr   error
	done      bool
	committed *attempt
	failedOn  map[string]bool
}

func (t *task) running() []*attempt {
	var out []*attempt
	for _, a := range t.attempts {
		if a.state == running {
			out = append(out, a)
		}
	}
	return out
}

func (t *task) pending() bool { return !t.done && len(t.running()) == 0 }

type worker struct {
	name, host string
	slots      int
	busy       int // attempts started and not yet ended (killing included)
	lost       bool
}

// Scheduler is the state machine. Not safe for concurrent use.
type Scheduler struct {
	cfg       Config
	maps      []*task
	reduces   []*task
	workers   map[string]*worker
	durations [2][]time.Duration
	over      bool
	// Counts for status and counters.
	Failed, Killed, Backups int
}

// New returns a scheduler for a job of cfg's shape.
func New(cfg Config) *Scheduler {
	if cfg.MaxAttempts <= 0 {
		cfg.MaxAttempts = 4
	}
	if cfg.SlowFactor <= 1 {
		cfg.SlowFactor = 2
	}
	if cfg.MinBackupAge <= 0 {
		cfg.MinBackupAge = 2 * time.Second
	}
	s := &Scheduler{cfg: cfg, workers: map[string]*worker{}}
	for i, h := range cfg.MapHosts {
		s.maps = append(s.maps, &task{id: TaskID{Map, i}, host: h, failedOn: map[string]bool{}})
	}
	for i := range cfg.Reducers {
		s.reduces = append(s.reduces, &task{id: TaskID{Reduce, i}, failedOn: map[string]bool{}})
	}
	return s
}

// Over reports whether the job has ended (JobDone or JobFailed returned).
func (s *Scheduler) Over() bool { return s.over }

// Stop ends the job from outside: its caller cancelled it, or the
// coordinator stops what still runs once the job is over. Every attempt
// still running is being stopped; its report, when it comes, counts it
// killed (not failed), and no step starts anything after Stop.
func (s *Scheduler) Stop() {
	s.over = true
	for _, ts := range [][]*task{s.maps, s.reduces} {
		for _, t := range ts {
			for _, a := range t.running() {
				a.state = killing
			}
		}
	}
}

func (s *Scheduler) task(id TaskID) *task {
	ts := s.maps
	if id.Kind == Reduce {
		ts = s.reduces
	}
	if id.Index < 0 || id.Index >= len(ts) {
		return nil
	}
	return ts[id.Index]
}

func (s *Scheduler) attempt(id AttemptID) (*task, *attempt) {
	t := s.task(id.Task)
	if t == nil || id.Attempt < 0 || id.Attempt >= len(t.attempts) {
		return nil, nil
	}
	return t, t.attempts[id.Attempt]
}

// Step applies one event at time now and returns the actions to carry out,
// in order. Events about unknown attempts or workers, or arriving after the
// job ended, are ignored (they return no action) except for freeing slots.
func (s *Scheduler) Step(now time.Time, ev Event) []Action {
	var acts []Action
	switch ev := ev.(type) {
	case WorkerJoined:
		if w, ok := s.workers[ev.Name]; ok && !w.lost {
			break
		}
		s.workers[ev.Name] = &worker{name: ev.Name, host: ev.Host, slots: max(1, ev.Slots)}
	case WorkerLost:
		acts = s.workerLost(ev.Name)
	case AttemptSucceeded:
		acts = s.succeeded(now, ev.Attempt)
	case AttemptFailed:
		acts = s.failed(ev)
	case Tick:
	}
	if s.over {
		return acts
	}
	if s.allDone() {
		s.over = true
		return append(acts, JobDone{})
	}
	acts = append(acts, s.assign(now)...)
	if s.cfg.Speculation {
		acts = append(acts, s.speculate(now)...)
	}
	if !s.cfg.WaitForWorkers && s.liveWorkers() == 0 && len(s.workers) > 0 {
		return append(acts, s.fail(ErrNoWorkers)...)
	}
	return acts
}

func (s *Scheduler) liveWorkers() int {
	n := 0
	for _, w := range s.workers {
		if !w.lost {
			n++
		}
	}
	return n
}

func (s *Scheduler) allDone() bool {
	for _, t := range s.maps {
		if !t.done {
			return false
		}
	}
	for _, t := range s.reduces {
		if !t.done {
			return false
		}
	}
	return true
}

func (s *Scheduler) endAttempt(a *attempt, st attemptState) {
	if a.state != running && a.state != killing {
		return
	}
	if w := s.workers[a.worker]; w != nil && w.busy > 0 {
		w.busy--
	}
	a.state = st
}

func (s *Scheduler) succeeded(now time.Time, id AttemptID) []Action {
	t, a := s.attempt(id)
	if a == nil || (a.state != running && a.state != killing) {
		return nil
	}
	wasKilling := a.state == killing
	s.endAttempt(a, succeeded)
	if s.over || t.done || wasKilling || s.workers[a.worker] == nil || s.workers[a.worker].lost {
		if wasKilling {
			s.Killed++
		}
		return []Action{Discard{Attempt: id, Worker: a.worker}}
	}
	t.done, t.committed = true, a
	s.durations[t.id.Kind] = append(s.durations[t.id.Kind], now.Sub(a.started))
	acts := []Action{Commit{Attempt: id, Worker: a.worker}}
	for _, o := range t.running() {
		o.state = killing
		acts = append(acts, Kill{Attempt: o.id, Worker: o.worker, Reason: fmt.Sprintf("%s won", id)})
	}
	return acts
}

func (s *Scheduler) failed(ev AttemptFailed) []Action {
	t, a := s.attempt(ev.Attempt)
	if a == nil || (a.state != running && a.state != killing) {
		return nil
	}
	if a.state == killing {
		s.endAttempt(a, killed)
		s.Killed++
		return nil
	}
	if w := s.workers[a.worker]; w == nil || w.lost {
		s.endAttempt(a, killed)
		s.Killed++
		return nil
	}
	if ev.FetchFailedMap >= 0 && t.id.Kind == Reduce {
		// A map output that is known gone — its worker was lost, or an
		// earlier fetch failure already has the map re-running — is no
		// fault of this attempt: it is a casualty, as the lost worker's
		// own attempts are.
		if m := s.task(TaskID{Map, ev.FetchFailedMap}); m != nil && (!m.done || s.workers[m.committed.worker] == nil || s.workers[m.committed.worker].lost) {
			s.endAttempt(a, killed)
			s.Killed++
			return nil
		}
	}
	s.endAttempt(a, failed)
	s.Failed++
	if s.over || t.done {
		return nil
	}
	t.lastErr = ev.Err
	t.failedOn[a.worker] = true
	var acts []Action
	if ev.FetchFailedMap >= 0 && t.id.Kind == Reduce {
		// Not the reduce's fault: re-run the map whose output is missing.
		if m := s.task(TaskID{Map, ev.FetchFailedMap}); m != nil && m.done {
			m.done, m.committed = false, nil
		}
		return nil
	}
	t.failures++
	if t.failures >= s.cfg.MaxAttempts {
		return append(acts, s.fail(fmt.Errorf("%s failed %d times; last error: %w", t.id, t.failures, ev.Err))...)
	}
	return acts
}

func (s *Scheduler) workerLost(name string) []Action {
	w, ok := s.workers[name]
	if !ok || w.lost {
		return nil
	}
	w.lost = true
	w.busy = 0
	reducesLeft := false
	for _, t := range s.reduces {
		if !t.done {
			reducesLeft = true
		}
	}
	for _, ts := range [][]*task{s.maps, s.reduces} {
		for _, t := range ts {
			for _, a := range t.attempts {
				if a.worker == name && (a.state == running || a.state == killing) {
					a.state = killed
					s.Killed++
				}
			}
			// A map output on the lost worker is gone; re-run it if a
			// reduce still needs it.
			if t.id.Kind == Map && t.done && t.committed.worker == name && reducesLeft {
				t.done, t.committed = false, nil
			}
		}
	}
	return nil
}

// fail ends the job: every running attempt is killed.
func (s *Scheduler) fail(err error) []Action {
	if s.over {
		return nil
	}
	s.over = true
	var acts []Action
	for _, ts := range [][]*task{s.maps, s.reduces} {
		for _, t := range ts {
			for _, a := range t.running() {
				a.state = killing
				acts = append(acts, Kill{Attempt: a.id, Worker: a.worker, Reason: "job failed"})
			}
		}
	}
	return append(acts, JobFailed{Err: err})
}

// freeWorkers returns the live workers with free slots, by name.
func (s *Scheduler) freeWorkers() []*worker {
	var out []*worker
	for _, w := range s.workers {
		if !w.lost && w.busy < w.slots {
			out = append(out, w)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

// phase returns the tasks that may be started now: the maps until every
// map is done, then the reduces.
func (s *Scheduler) phase() []*task {
	for _, t := range s.maps {
		if !t.done {
			return s.maps
		}
	}
	return s.reduces
}

func (s *Scheduler) start(now time.Time, t *task, w *worker, backup bool) Start {
	a := &attempt{id: AttemptID{Task: t.id, Attempt: len(t.attempts)}, worker: w.name, started: now, backup: backup}
	t.attempts = append(t.attempts, a)
	w.busy++
	st := Start{Attempt: a.id, Worker: w.name, Speculative: backup}
	if t.id.Kind == Reduce {
		for _, m := range s.maps {
			st.MapOutputs = append(st.MapOutputs, MapOutput{Map: m.id.Index, Attempt: m.committed.id, Worker: m.committed.worker})
		}
	}
	if backup {
		s.Backups++
	}
	return st
}

// assign starts pending tasks of the current phase on free slots: first
// each map on a worker of its host, then the rest in task order, a retried
// task preferring a worker it has not failed on.
func (s *Scheduler) assign(now time.Time) []Action {
	var acts []Action
	ts := s.phase()
	var pending []*task
	for _, t := range ts {
		if t.pending() {
			pending = append(pending, t)
		}
	}
	if len(pending) == 0 {
		return nil
	}
	taken := map[*task]bool{}
	// Local matches.
	for _, w := range s.freeWorkers() {
		for _, t := range pending {
			if w.busy >= w.slots {
				break
			}
			if !taken[t] && t.host != "" && t.host == w.host && !t.failedOn[w.name] {
				taken[t] = true
				acts = append(acts, s.start(now, t, w, false))
			}
		}
	}
	// The rest.
	for _, t := range pending {
		if taken[t] {
			continue
		}
		free := s.freeWorkers()
		if len(free) == 0 {
			break
		}
		w := free[0]
		for _, c := range free {
			if !t.failedOn[c.name] {
				w = c
				break
			}
		}
		// Spread: the free worker with the fewest busy slots.
		best := w
		for _, c := range free {
			if !t.failedOn[c.name] && c.busy < best.busy {
				best = c
			}
		}
		taken[t] = true
		acts = append(acts, s.start(now, t, best, false))
	}
	return acts
}

// speculate starts backups of stragglers once the phase has no pending
// task.
func (s *Scheduler) speculate(now time.Time) []Action {
	ts := s.phase()
	kind := Map
	if len(ts) > 0 {
		kind = ts[0].id.Kind
	}
	done := slices.Clone(s.durations[kind])
	if len(done) == 0 {
		return nil
	}
	for _, t := range ts {
		if t.pending() {
			return nil
		}
	}
	slices.Sort(done)
	median := done[len(done)/2]
	threshold := max(s.cfg.MinBackupAge, time.Duration(float64(median)*s.cfg.SlowFactor))
	var acts []Action
	for _, t := range ts {
		run := t.running()
		if t.done || len(run) != 1 || slices.ContainsFunc(t.attempts, func(a *attempt) bool { return a.backup }) {
			continue
		}
		if now.Sub(run[0].started) < threshold {
			continue
		}
		for _, w := range s.freeWorkers() {
			if w.name != run[0].worker {
				acts = append(acts, s.start(now, t, w, true))
				break
			}
		}
	}
	return acts
}

// Status counts a phase's tasks.
type Status struct {
	Total, Done, Running, Failed int
}

// Phase returns the status of the maps or the reduces.
func (s *Scheduler) Phase(k Kind) Status {
	ts := s.maps
	if k == Reduce {
		ts = s.reduces
	}
	st := Status{Total: len(ts)}
	for _, t := range ts {
		if t.done {
			st.Done++
		}
		st.Running += len(t.running())
		for _, a := range t.attempts {
			if a.state == failed {
				st.Failed++
			}
		}
	}
	return st
}
