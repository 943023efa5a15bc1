//go:build integration

package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/tabuladb/tabula/storage/blob/blobtest"
	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/commitlog"
	"github.com/tabuladb/tabula/storage/coord"
	"github.com/tabuladb/tabula/storage/meta"
)

// TestLogGCConsulS3 runs a commit-log GC round on what a cluster runs on:
// server keys in Consul (one held, one released by its ended session),
// commit logs and a sorted copy in S3 (MinIO).
func TestLogGCConsulS3(t *testing.T) {
	addr := os.Getenv("TABULA_TEST_CONSUL_ADDR")
	if addr == "" {
		t.Fatal("TABULA_TEST_CONSUL_ADDR is not set: run the integration tests through deploy/test.sh, which starts Consul")
	}
	var nonce [6]byte
	_, _ = rand.Read(nonce[:])
	c, err := coord.NewConsul(coord.ConsulConfig{Address: addr, Prefix: "tabula/test-cluster-gc-" + hex.EncodeToString(nonce[:]) + "/"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	store := blobtest.NewS3(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	var (
		held     = NewServerName("127.0.0.1:7001")
		released = NewServerName("127.0.0.1:7002")
		last     = NewServerName("127.0.0.1:7003") // dead, a tablet's last server
		dead     = NewServerName("127.0.0.1:7004")
	)
	for _, s := range []string{held, released} {
		sess, err := c.NewSession(ctx, coord.SessionOptions{LockDelay: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := sess.TryLock(ctx, coord.ServerKey(s), []byte(meta.ServerAddr(s))); err != nil {
			t.Fatal(err)
		}
		if s == released {
			if err := sess.Destroy(ctx); err != nil {
				t.Fatal(err)
			}
		} else {
			defer sess.Destroy(context.Background())
		}
	}
	for _, s := range []string{held, released, last, dead} {
		opts := commitlog.Options{Store: store, Prefix: LogPrefix(s)}
		l, err := commitlog.Open(ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			if _, err := l.Write(ctx, commitlog.Record{Tablet: "t", FirstSeq: uint64(i + 1), Mutation: cell.RowMutation{Row: []byte("r"), Mutations: []cell.Mutation{cell.Set("f", []byte("q"), 1000, []byte("v"))}}}); err != nil {
				t.Fatal(err)
			}
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := commitlog.Sort(ctx, opts, commitlog.SortedLog{Store: store, Prefix: SortedLogPrefix(s)}); err != nil {
			t.Fatal(err)
		}
	}

	g := newLogGC(store, c, 0)
	deleted, err := g.collect(ctx, func(context.Context) ([]string, error) { return []string{last}, nil })
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{logName(dead)}; !slices.Equal(deleted, want) {
		t.Fatalf("deleted %v, want %v", deleted, want)
	}
	for _, s := range []string{held, released, last, dead} {
		for _, p := range []string{LogPrefix(s) + "/", SortedLogPrefix(s) + "/"} {
			objs, err := store.List(ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			if gone := len(objs) == 0; gone != (s == dead) {
				t.Errorf("%s: %d objects left", p, len(objs))
			}
		}
	}
}
