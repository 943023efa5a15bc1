package faultcampaign

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"cloud.google.com/go/bigtable"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/tabuladb/tabula/storage/client"
	"github.com/tabuladb/tabula/storage/gateways"
)

// Config is one campaign.
type Config struct {
	Dir                            string // logs, history, report; required
	TabulaBin, ConsulBin, MinIOBin string
	Servers                        int      // ≥ 3
	Cycles                         int      // nemesis cycles
	Kinds                          []string // the kinds to draw from (skipped ones are left out)
	Workers                        int      // per client library
	Seed                           uint64
	// Settle bounds the wait after a fault is healed for every hot row to
	// answer again before the next fault.
	Settle time.Duration
	Log    func(format string, args ...any)
}

// Result is what a campaign found.
type Result struct {
	Config   Config
	Start    time.Time
	Duration time.Duration
	Events   []Event
	Faults   []Fault
	Rows     []RowResult
	Finals   []Final
	// SelfStops are the processes that stopped by themselves (a lapsed
	// lease, a failed commit log) and the supervisor restarted.
	SelfStops []string
	// Anomalies are the findings: illegal row histories, lost or doubled
	// writes, a corruption served as data, a fault that could not be
	// healed.
	Anomalies []string
}

// Hot rows: two per tablet of the hot table, split at b, d, f.
var hotRows = []string{"a0", "a1", "c0", "c1", "e0", "e1", "g0", "g1"}

const (
	hotTable    = "hot"
	victimTable = "victim"
)

// Run runs a campaign: it starts the cluster, loads, applies cfg.Cycles
// faults while the workers run, heals, reads every row back and checks.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	logf := cfg.Log
	if logf == nil {
		logf = func(string, ...any) {}
	}
	c, err := StartCluster(ctx, ClusterConfig{Dir: cfg.Dir, TabulaBin: cfg.TabulaBin, ConsulBin: cfg.ConsulBin, MinIOBin: cfg.MinIOBin,
		Masters: 2, Servers: cfg.Servers, SplitSize: 256 << 10, MemtableSize: 64 << 10,
		// METADATA splits too (a few rows per METADATA tablet), so that
		// the faults meet the three-level hierarchy: servers holding
		// METADATA tablets killed, paused, drained.
		MetadataSplitSize: 4 << 10})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	logf("cluster %s up: consul %s, minio %s, %d masters, %d servers", c.Name, c.Consul.Addr, c.MinIO.Addr, len(c.Masters), len(c.Servers))

	// The official clients enter through every tablet server's gateway,
	// as storage/gateways spreads them: a server that dies or pauses
	// leaves the rotation, and its tablets' rows wait only for their
	// recovery elsewhere.
	var seeds []string
	for _, s := range c.Servers {
		seeds = append(seeds, s.Addr)
	}
	conn, err := gateways.DialWith(seeds, gateways.Options{Logger: slog.New(slog.DiscardHandler)}, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(CountAttempts))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	data, err := bigtable.NewClientWithConfig(ctx, "p", "i", bigtable.ClientConfig{MetricsProvider: bigtable.NoopMetricsProvider{}}, option.WithGRPCConn(conn))
	if err != nil {
		return nil, err
	}
	defer data.Close()
	admin, err := bigtable.NewAdminClient(ctx, "p", "i", option.WithGRPCConn(conn))
	if err != nil {
		return nil, err
	}
	defer admin.Close()
	actx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := retry(actx, func() error {
		return admin.CreateTableFromConf(actx, &bigtable.TableConf{TableID: hotTable, SplitKeys: []string{"b", "d", "f"},
			Families: map[string]bigtable.GCPolicy{Family: bigtable.NoGcPolicy()}})
	}); err != nil {
		return nil, fmt.Errorf("create %s: %w", hotTable, err)
	}
	if err := retry(actx, func() error {
		return admin.CreateTableFromConf(actx, &bigtable.TableConf{TableID: victimTable,
			Families: map[string]bigtable.GCPolicy{Family: bigtable.NoGcPolicy()}})
	}); err != nil {
		return nil, fmt.Errorf("create %s: %w", victimTable, err)
	}
	// Tabula's client enters through another server: it routes to the
	// owners itself. Its attempts are counted too: it resends an
	// idempotent write (a delete) after an answer that leaves open
	// whether it was applied, and when a later attempt succeeds, it
	// answers OK — the earlier attempt may have been applied all the
	// same, before other clients' writes the later one follows.
	tcl, err := client.Dial(c.Servers[1].Addr, client.Options{Project: "p", Instance: "i",
		UnaryInterceptors: []grpc.UnaryClientInterceptor{CountAttempts}})
	if err != nil {
		return nil, err
	}
	defer tcl.Close()

	start := time.Now()
	h := NewHistory(start)
	rng := rand.New(rand.NewPCG(cfg.Seed, 0xfa17))
	nem := &Nemesis{C: c, Admin: admin, Data: data, Table: hotTable, Victim: victimTable, Rows: hotRows, History: h, Rand: rng, Log: logf}
	if err := retry(actx, func() error { return nem.LoadVictim(actx) }); err != nil {
		return nil, fmt.Errorf("load %s: %w", victimTable, err)
	}
	// Every hot row answers before the faults start.
	if err := retry(actx, func() error {
		for _, r := range hotRows {
			if _, err := NewOfficial("probe", data.Open(hotTable)).Do(actx, r, Input{Kind: OpRead}); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("hot rows not served: %w", err)
	}

	res := &Result{Config: cfg, Start: start}
	loadCtx, stopLoad := context.WithCancel(ctx)
	var supMu sync.Mutex
	supDone := make(chan struct{})
	supCtx, stopSup := context.WithCancel(ctx)
	defer stopSup()
	go func() {
		defer close(supDone)
		c.Supervise(supCtx, func(p *Proc, err error) {
			supMu.Lock()
			defer supMu.Unlock()
			msg := fmt.Sprintf("%.1fs %s stopped by itself and was restarted", h.Since(time.Now()).Seconds(), p.Name)
			if err != nil {
				msg += ": restart failed: " + err.Error()
			}
			logf("supervisor: %s", msg)
			res.SelfStops = append(res.SelfStops, msg)
		})
	}()
	var wg sync.WaitGroup
	seed := cfg.Seed * 1000
	for i := range cfg.Workers {
		for _, rc := range []RowClient{
			NewOfficial(fmt.Sprintf("official-%d", i+1), data.Open(hotTable)),
			NewTabula(fmt.Sprintf("tabula-%d", i+1), tcl, hotTable),
		} {
			w := &Worker{Client: rc, Rows: hotRows, History: h, Timeout: 4 * time.Second, Seed: seed}
			seed++
			wg.Add(1)
			go func() {
				defer wg.Done()
				w.Run(loadCtx)
			}()
		}
	}
	logf("load running: %d workers per client library on %d hot rows", cfg.Workers, len(hotRows))

	// The nemesis: a shuffled round of the kinds, again and again, so
	// that every kind comes up within len(kinds) cycles.
	var order []string
	quiet := func(d time.Duration) {
		select {
		case <-ctx.Done():
		case <-time.After(d):
		}
	}
	quiet(3 * time.Second)
	for i := 0; i < cfg.Cycles && ctx.Err() == nil; i++ {
		if len(order) == 0 {
			order = append([]string(nil), cfg.Kinds...)
			rng.Shuffle(len(order), func(a, b int) { order[a], order[b] = order[b], order[a] })
		}
		kind := order[0]
		order = order[1:]
		f := nem.Apply(ctx, kind)
		logf("fault %d/%d %s %s: %.1fs–%.1fs %s %s", i+1, cfg.Cycles, f.Kind, f.Target, f.Start.Seconds(), f.Healed.Seconds(), f.Note, f.Err)
		res.Faults = append(res.Faults, f)
		waitRowsAnswer(ctx, h, h.Since(time.Now()), cfg.Settle)
		quiet(time.Duration(1+rng.IntN(2)) * time.Second)
	}
	quiet(2 * time.Second)
	stopLoad()
	wg.Wait()
	loadEnd := h.Since(time.Now())
	for i := range res.Faults {
		if i+1 < len(res.Faults) {
			res.Faults[i].End = res.Faults[i+1].Start
		} else {
			res.Faults[i].End = loadEnd
		}
	}

	// Final reads, after every fault healed: each row read until it
	// answers, recorded in the history as reads.
	finals := map[string]RowState{}
	fctx, fcancel := context.WithTimeout(ctx, 2*time.Minute)
	defer fcancel()
	reader := NewTabula("final", tcl, hotTable)
	fc := h.newClient()
	for _, r := range hotRows {
		err := retry(fctx, func() error {
			call := h.Since(time.Now())
			out, err := reader.Do(fctx, r, Input{Kind: OpRead})
			if err != nil {
				return err
			}
			h.add(Event{Client: fc, Worker: "final", Row: r, In: Input{Kind: OpRead}, Out: out, Call: call, Return: h.Since(time.Now())})
			finals[r] = out.Read
			return nil
		})
		if err != nil {
			res.Anomalies = append(res.Anomalies, fmt.Sprintf("row %s: final read failed after the faults healed: %v", r, err))
		}
	}
	stopSup()
	<-supDone
	res.Duration = time.Since(start)
	res.Events = h.Events()
	analyze(res)
	return res, nil
}

// waitRowsAnswer waits until every hot row had a successful operation
// that started after since, or limit passes.
func waitRowsAnswer(ctx context.Context, h *History, since, limit time.Duration) {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		seen := map[string]bool{}
		for _, e := range h.Events() {
			if e.OK() && e.Call >= since {
				seen[e.Row] = true
			}
		}
		if len(seen) == len(hotRows) {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// retry calls f until it succeeds or ctx ends.
func retry(ctx context.Context, f func() error) error {
	var err error
	for {
		if err = f(); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%v (last error: %w)", ctx.Err(), err)
		case <-time.After(300 * time.Millisecond):
		}
	}
}

// analyze fills the unavailability of each fault, checks the rows and
// lists the anomalies.
func analyze(res *Result) {
	rows := ByRow(res.Events)
	libs := ByLibrary(res.Events)
	for i := range res.Faults {
		f := &res.Faults[i]
		f.ClientStall, f.ClientStalled = clientStall(libs, f.Start, f.End)
		for _, evs := range rows {
			g := longestGap(evs, f.Start, f.End)
			f.Unavailable = max(f.Unavailable, g)
			f.Waited = max(f.Waited, longestWait(evs, f.Start, f.End))
			if g > 2*time.Second {
				f.RowsStalled++
			}
		}
		if f.Err != "" {
			res.Anomalies = append(res.Anomalies, fmt.Sprintf("fault %s %s at %.1fs: %s", f.Kind, f.Target, f.Start.Seconds(), f.Err))
		}
	}
	res.Rows = CheckRows(res.Events, res.Config.Dir, 2*time.Minute)
	for _, r := range res.Rows {
		switch r.Result {
		case "Ok":
		case "Illegal":
			res.Anomalies = append(res.Anomalies, fmt.Sprintf("row %s: history of %d operations is not linearizable, in columns %v (porcupine: %s); the shortest illegal prefix ends:\n  %s",
				r.Row, r.Ops, r.Columns, r.Visualized, strings.Join(r.Window, "\n  ")))
		default:
			res.Anomalies = append(res.Anomalies, fmt.Sprintf("row %s: linearizability check did not finish (%s, %d operations, %d unknown)", r.Row, r.Result, r.Ops, r.Unknown))
		}
	}
	finals := map[string]RowState{}
	for _, e := range res.Events {
		if e.Worker == "final" && e.OK() {
			finals[e.Row] = e.Out.Read
		}
	}
	res.Finals = CheckFinal(res.Events, finals)
	for _, f := range res.Finals {
		if f.CounterOutsideBounds {
			res.Anomalies = append(res.Anomalies, fmt.Sprintf("row %s: counter %d, acknowledged increments %d, unknown %d", f.Row, f.State.N, f.AckedIncr, f.UnkIncr))
		}
		if len(f.MissingAppends) > 0 {
			res.Anomalies = append(res.Anomalies, fmt.Sprintf("row %s: acknowledged appends lost: %v", f.Row, f.MissingAppends))
		}
		if len(f.DuplicateAppends) > 0 {
			res.Anomalies = append(res.Anomalies, fmt.Sprintf("row %s: appends applied twice: %v", f.Row, f.DuplicateAppends))
		}
		if f.State.C != f.State.D || f.State.V != f.State.W {
			res.Anomalies = append(res.Anomalies, fmt.Sprintf("row %s: half-applied: %s", f.Row, f.State))
		}
	}
}

// clientStall is the longest stretch of [from, to) in which no operation
// of one client library succeeded (longestGap of its events), and the
// library; the first by name on ties.
func clientStall(libs map[string][]Event, from, to time.Duration) (time.Duration, string) {
	names := make([]string, 0, len(libs))
	for lib := range libs {
		names = append(names, lib)
	}
	sort.Strings(names)
	var stall time.Duration
	var which string
	for _, lib := range names {
		if g := longestGap(libs[lib], from, to); g > stall {
			stall, which = g, lib
		}
	}
	return stall, which
}

// longestGap is the longest stretch of [from, to) in which no operation
// of evs succeeded (a success counts at its return), counted from from.
func longestGap(evs []Event, from, to time.Duration) time.Duration {
	var times []time.Duration
	for _, e := range evs {
		if e.OK() && e.Worker != "final" {
			times = append(times, e.Return)
		}
	}
	sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
	last, gap := from, time.Duration(0)
	for _, t := range times {
		if t <= from {
			continue
		}
		if t >= to {
			break
		}
		gap = max(gap, t-last)
		last = t
	}
	return max(gap, to-last)
}

// longestWait is the longest a caller of evs waited for the row within
// [from, to): for each operation called in the window, its latency if it
// succeeded; if not, the time from its call to the earliest return of a
// success called at or after it (as if its caller had kept retrying), or
// to `to` if none returned by then. Unlike longestGap it does not count
// time in which nobody asked for the row — with a few workers each stuck
// up to its deadline on rows that are down, a row can go untried for
// seconds — so it is the unavailability a client that kept retrying
// would have seen.
func longestWait(evs []Event, from, to time.Duration) time.Duration {
	var oks []Event
	for _, e := range evs {
		if e.OK() && e.Worker != "final" {
			oks = append(oks, e)
		}
	}
	sort.Slice(oks, func(i, j int) bool { return oks[i].Call < oks[j].Call })
	// firstReturn[i]: the earliest return among oks[i:].
	firstReturn := make([]time.Duration, len(oks)+1)
	firstReturn[len(oks)] = to
	for i := len(oks) - 1; i >= 0; i-- {
		firstReturn[i] = min(oks[i].Return, firstReturn[i+1])
	}
	var wait time.Duration
	for _, e := range evs {
		if e.Worker == "final" || e.Call < from || e.Call >= to {
			continue
		}
		if e.OK() {
			wait = max(wait, min(e.Return, to)-e.Call)
			continue
		}
		i := sort.Search(len(oks), func(i int) bool { return oks[i].Call >= e.Call })
		wait = max(wait, min(firstReturn[i], to)-e.Call)
	}
	return wait
}

// Keep writes the history into the run's directory (for diagnosis of a
// failed run; the servers' logs are there already).
func (r *Result) Keep() error {
	if err := WriteHistory(filepath.Join(r.Config.Dir, "history.txt"), r.Events); err != nil {
		return err
	}
	b, err := json.Marshal(r.Events)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(r.Config.Dir, "history.json"), b, 0o644)
}
