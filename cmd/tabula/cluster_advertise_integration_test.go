//go:build integration

package main

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestClusterAdvertiseAddr runs a cluster with mutual TLS whose second
// tablet server listens on every interface (--addr 0.0.0.0:0) and is
// advertised as 127.0.0.1, which its certificate names: it registers and
// is dialed at that address, the master assigns it tablets, and forwarded
// reads and writes reach them. A tablet server listening on a wildcard
// without --advertise-addr refuses to start, saying so.
func TestClusterAdvertiseAddr(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := newTestCluster(t, clusterOptions{masters: 1, servers: 1, mtls: true})
	c.opts.extraServer = []string{"--addr", "0.0.0.0:0", "--advertise-addr", "127.0.0.1"}
	wild := c.startServer()
	if !strings.HasPrefix(wild.addr, "127.0.0.1:") {
		t.Fatalf("the wildcard server is ready at %q, want its advertised 127.0.0.1:PORT", wild.addr)
	}
	cl, admin := officialClients(t, ctx, c.servers[0].addr)
	if err := admin.CreatePresplitTable(ctx, "t", []string{"g", "n", "t"}); err != nil {
		t.Fatal(err)
	}
	if err := admin.CreateColumnFamily(ctx, "t", "f"); err != nil {
		t.Fatal(err)
	}
	c.waitAllServed(60*time.Second, 4)
	waitFor(t, 60*time.Second, "the advertised server holds user tablets", func() (bool, string) {
		_, st := c.activeMaster()
		var seen []string
		for _, s := range st.Servers {
			seen = append(seen, s.Addr)
			if s.Addr != wild.addr {
				continue
			}
			for _, tb := range s.Tablets {
				if !strings.Contains(tb.Table, "METADATA") {
					return true, ""
				}
			}
		}
		return false, fmt.Sprintf("servers %v", seen)
	})
	// Through the first server: the rows of the wildcard server's
	// tablets are forwarded to it, over TLS checked against 127.0.0.1.
	writeRows(t, ctx, cl.Open("t"), "", 200, 100)
	if got := dumpTable(t, ctx, cl, "t"); len(got) != 200 {
		t.Fatalf("read %d cells back, want 200", len(got))
	}

	refused := exec.CommandContext(ctx, c.bin, append([]string{"tabletserver", "--consul", c.consul, "--cluster", c.name,
		"--store", c.store, "--addr", "0.0.0.0:0"}, c.roleArgs...)...)
	refused.Env = c.env
	var stderr bytes.Buffer
	refused.Stderr = &stderr
	if err := refused.Run(); err == nil {
		t.Fatal("a tablet server on 0.0.0.0 without --advertise-addr started")
	}
	if !strings.Contains(stderr.String(), "--advertise-addr") {
		t.Fatalf("the refusal does not name --advertise-addr:\n%s", stderr.String())
	}
}
