package crashtest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/commitlog"
	"github.com/tabuladb/tabula/storage/sstable"
	"github.com/tabuladb/tabula/storage/tablet"
	"github.com/tabuladb/tabula/storage/tabletdesc"
)

// The shape of the workload. Every row mutation sets Columns cells of one
// row at one timestamp that no other mutation uses, so a half-applied
// mutation shows as a timestamp with fewer than Columns cells; one in
// DeleteEvery also deletes the row first.
const (
	Rows        = 400
	Columns     = 4
	Writers     = 4
	DeleteEvery = 10
	Family      = "f"
	TabletID    = "crash"
)

// Schema is the tablet's schema: one family, every version kept.
func Schema() tabletdesc.Schema {
	return tabletdesc.Schema{Families: map[string]tabletdesc.Family{Family: {}}}
}

// Engine is an open tablet on a local directory with its commit log.
type Engine struct {
	Tablet *tablet.Tablet
	Log    *commitlog.Log
}

// OpenEngine opens (recovering if need be) the tablet kept under dir.
// memtableBytes is small so that flushes and compactions are frequent.
func OpenEngine(ctx context.Context, dir string, memtableBytes int64) (*Engine, error) {
	store, err := blob.NewLocal(filepath.Join(dir, "store"))
	if err != nil {
		return nil, err
	}
	logOpts, err := engineLog(ctx, dir)
	if err != nil {
		return nil, err
	}
	log, err := commitlog.Open(ctx, logOpts)
	if err != nil {
		return nil, err
	}
	t, err := tablet.Open(ctx, tablet.Options{
		ID:            TabletID,
		Schema:        Schema(),
		Store:         store,
		Dir:           "tablets/" + TabletID,
		Log:           log,
		LogOptions:    logOpts,
		Cache:         sstable.NewCache(8 << 20),
		StateStore:    tablet.NewBlobStateStore(store, "state"),
		MemtableBytes: memtableBytes,
		MaxSSTables:   3,
	})
	if err != nil {
		log.Close()
		return nil, err
	}
	return &Engine{Tablet: t, Log: log}, nil
}

// Close closes the tablet and the log.
func (e *Engine) Close() error {
	err := e.Tablet.Close()
	if lerr := e.Log.Close(); err == nil {
		err = lerr
	}
	return err
}

// RowKey names row i.
func RowKey(i int) []byte { return fmt.Appendf(nil, "row%05d", i) }

// Value is the value of column col of the mutation at timestamp ts: it
// names both, so a cell in the wrong place is caught too.
func Value(ts int64, col int) []byte {
	v := fmt.Appendf(nil, "ts=%d col=%d ", ts, col)
	for len(v) < 120 {
		v = append(v, 'x')
	}
	return v
}

// Mutation returns the row mutation of timestamp ts on row.
func Mutation(row []byte, ts int64, deleteRow bool) cell.RowMutation {
	rm := cell.RowMutation{Row: row}
	if deleteRow {
		rm.Mutations = append(rm.Mutations, cell.DeleteRow())
	}
	for c := 0; c < Columns; c++ {
		rm.Mutations = append(rm.Mutations, cell.Set(Family, fmt.Appendf(nil, "c%d", c), ts, Value(ts, c)))
	}
	return rm
}

// Writer is the subprocess: it opens the tablet under dir, prints "ready",
// then writes until killed. Writer w owns the rows i with i%Writers == w, so
// each row's mutations are issued one at a time, in the order printed.
// Before each Apply it prints "try ROW TS KIND", after it returns nil
// "ack ROW TS". Timestamps start at base and never repeat across runs
// (the parent passes a base above every earlier one).
func Writer(dir string, base int64, seed uint64, out io.Writer) error {
	ctx := context.Background()
	e, err := OpenEngine(ctx, dir, 48<<10)
	if err != nil {
		return err
	}
	var mu sync.Mutex
	w := bufio.NewWriter(out)
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(w, format, args...)
		w.Flush()
	}
	say("ready\n")
	var next atomic.Int64
	next.Store(base)
	errs := make(chan error, Writers+1)
	for g := 0; g < Writers; g++ {
		go func(g int) {
			r := rand.New(rand.NewPCG(seed, uint64(g)))
			for {
				row := r.IntN(Rows/Writers)*Writers + g
				ts := next.Add(1)
				del := r.IntN(DeleteEvery) == 0
				kind := "set"
				if del {
					kind = "delrow"
				}
				say("try %d %d %s\n", row, ts, kind)
				if err := e.Tablet.Apply(ctx, Mutation(RowKey(row), ts, del)); err != nil {
					errs <- fmt.Errorf("apply: %w", err)
					return
				}
				say("ack %d %d\n", row, ts)
			}
		}(g)
	}
	// Compactions and log truncation at random moments, so kills land in
	// them too.
	go func() {
		r := rand.New(rand.NewPCG(seed, 99))
		for {
			time.Sleep(time.Duration(20+r.IntN(60)) * time.Millisecond)
			if err := e.Tablet.Compact(ctx, r.IntN(2) == 0); err != nil {
				errs <- fmt.Errorf("compact: %w", err)
				return
			}
			if err := e.Log.Truncate(ctx, e.Tablet.State().RedoPoint); err != nil {
				errs <- fmt.Errorf("truncate log: %w", err)
				return
			}
		}
	}()
	return <-errs
}

// engineLog returns the options of the commit log of the engine under
// dir: a local directory unless the environment names an S3 log
// (EnvLogBucket; see objectLogFromEnv).
var engineLog = func(ctx context.Context, dir string) (commitlog.Options, error) {
	if os.Getenv(EnvLogBucket) != "" {
		return objectLogFromEnv(ctx)
	}
	return commitlog.Options{Dir: filepath.Join(dir, "log"), SegmentBytes: 256 << 10}, nil
}

// EnvLogBucket, when set, puts the engine's commit log in that bucket of
// the S3 server of the integration tests (TABULA_TEST_S3_*), with several
// flushes in flight: the object-store crash test.
const EnvLogBucket = "TABULA_CRASH_LOG_BUCKET"

// objectLogFromEnv is the S3 log of EnvLogBucket: small objects, up to
// four PUTs in flight whatever their size, small segments so that
// rollovers (which wait for every PUT of the segment) happen too.
func objectLogFromEnv(ctx context.Context) (commitlog.Options, error) {
	cfg := blob.S3Config{
		Endpoint:  os.Getenv("TABULA_TEST_S3_ENDPOINT"),
		AccessKey: os.Getenv("TABULA_TEST_S3_ACCESS_KEY"),
		SecretKey: os.Getenv("TABULA_TEST_S3_SECRET_KEY"),
		Bucket:    os.Getenv(EnvLogBucket),
		// The test command's MinIO speaks HTTPS with a private CA.
		CAFile: os.Getenv("TABULA_TEST_S3_CA"),
	}
	cfg.Secure = cfg.CAFile != ""
	store, err := blob.NewS3(ctx, cfg)
	if err != nil {
		return commitlog.Options{}, err
	}
	return commitlog.Options{Store: store, Prefix: "log", SegmentBytes: 64 << 10, MaxBatchBytes: 2 << 10,
		FlushConcurrency: 4, ConcurrentFlushBytes: 1}, nil
}

// RunWriterFromEnv runs Writer when the environment asks for it (the test
// binary re-executing itself) and exits; otherwise it returns.
func RunWriterFromEnv() {
	dir := os.Getenv("TABULA_CRASH_DIR")
	if dir == "" {
		return
	}
	var base int64
	var seed uint64
	fmt.Sscan(os.Getenv("TABULA_CRASH_BASE"), &base)
	fmt.Sscan(os.Getenv("TABULA_CRASH_SEED"), &seed)
	err := Writer(dir, base, seed, os.Stdout)
	fmt.Fprintln(os.Stderr, "writer:", err)
	os.Exit(3)
}
