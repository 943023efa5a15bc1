//go:build integration

package coord_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tabuladb/tabula/security/certs"
	"github.com/tabuladb/tabula/storage/coord"
)

// TestConsulOverHTTPS: with ConsulConfig.CAFile the client speaks HTTPS to
// the agent (deploy/test.sh serves its API over HTTPS too) — keys, a
// session's lock and a watch work; plain HTTP to the HTTPS port, and an
// agent certificate a CA other than the given one signed, fail.
func TestConsulOverHTTPS(t *testing.T) {
	addr, ca := os.Getenv("TABULA_TEST_CONSUL_HTTPS_ADDR"), os.Getenv("TABULA_TEST_CONSUL_CA")
	if addr == "" || ca == "" {
		t.Fatal("TABULA_TEST_CONSUL_HTTPS_ADDR and TABULA_TEST_CONSUL_CA are not set: run the integration tests through deploy/test.sh, which serves Consul over HTTPS too")
	}
	prefix := fmt.Sprintf("tabula/test-%s-https/", testRun)
	open := func(caFile string) *coord.Consul {
		c, err := coord.NewConsul(coord.ConsulConfig{Address: addr, CAFile: caFile, Prefix: prefix, RetryInterval: 200 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := open(ca)
	events, err := c.Watch(ctx, "w/")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Put(ctx, "w/k", []byte("v")); err != nil {
		t.Fatalf("Put over HTTPS: %v", err)
	}
	if e, err := c.Get(ctx, "w/k"); err != nil || string(e.Value) != "v" {
		t.Fatalf("Get over HTTPS: %q, %v", e.Value, err)
	}
	for seen := false; !seen; {
		select {
		case ev := <-events:
			seen = ev.Entry.Key == "w/k"
		case <-ctx.Done():
			t.Fatal("the watch over HTTPS saw no event of w/k")
		}
	}
	sess, err := c.NewSession(ctx, coord.SessionOptions{LockDelay: time.Millisecond})
	if err != nil {
		t.Fatalf("session over HTTPS: %v", err)
	}
	if _, err := sess.TryLock(ctx, "lock", []byte("me")); err != nil {
		t.Fatalf("lock over HTTPS: %v", err)
	}
	if err := sess.Destroy(ctx); err != nil {
		t.Fatal(err)
	}

	// Plain HTTP to the HTTPS port, and HTTPS verified with another CA.
	other := filepath.Join(t.TempDir(), "other")
	if _, err := certs.Generate(other, certs.Spec{}); err != nil {
		t.Fatal(err)
	}
	for name, caFile := range map[string]string{"plain HTTP": "", "another CA": filepath.Join(other, certs.CAFile)} {
		short, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := open(caFile).Get(short, "w/k")
		cancel()
		if err == nil {
			t.Errorf("%s to the HTTPS API: answered", name)
		}
	}
}
