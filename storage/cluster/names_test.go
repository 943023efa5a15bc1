package cluster

import (
	"context"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/coord"
	"github.com/tabuladb/tabula/storage/meta"
)

func TestServerName(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:7000", "[::1]:7000", "tablet-3.example:443"} {
		a, b := NewServerName(addr), NewServerName(addr)
		if a == b {
			t.Fatalf("two servers at %s got the same name %s: a restarted server would take over the dead one's log", addr, a)
		}
		if !regexp.MustCompile(`^` + regexp.QuoteMeta(addr) + `/[0-9a-f]{12}$`).MatchString(a) {
			t.Fatalf("NewServerName(%q) = %q, want <addr>/<12 hex digits>", addr, a)
		}
		// Clients dial the address in METADATA's loc:server.
		if got := meta.ServerAddr(a); got != addr {
			t.Fatalf("meta.ServerAddr(%q) = %q, want %q", a, got, addr)
		}
		// The master reads the name back from the server's key.
		if got, ok := coord.ServerID(coord.ServerKey(a)); !ok || got != a {
			t.Fatalf("coord.ServerID(ServerKey(%q)) = %q, %v", a, got, ok)
		}
		// Its log's objects are valid names, under logs/ and nowhere else.
		for _, p := range []string{LogPrefix(a), SortedLogPrefix(a)} {
			if err := blob.ValidateName(p + "/x"); err != nil {
				t.Fatalf("objects under %q: %v", p, err)
			}
		}
		if LogPrefix(a) == LogPrefix(b) {
			t.Fatalf("two servers share the log prefix %s", LogPrefix(a))
		}
	}
}

func TestLiveServers(t *testing.T) {
	ctx := context.Background()
	c := coord.NewLocal(coord.LocalConfig{})
	defer c.Close()
	lockServer(t, c, "h:1/held")
	if err := lockServer(t, c, "h:2/released").Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := liveServers(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"h:1/held"}; !slices.Equal(got, want) {
		t.Fatalf("liveServers = %v, want %v (a released key is no live server)", got, want)
	}
}

func TestEventRing(t *testing.T) {
	r := newEventRing(3)
	t0 := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	for i := range 5 {
		r.add(event{Time: t0.Add(time.Duration(i) * time.Second), Kind: string(rune('a' + i))})
	}
	r.add(event{Kind: "now"})
	var kinds []string
	for _, e := range r.newest() {
		kinds = append(kinds, e.Kind)
	}
	if want := []string{"now", "e", "d"}; !slices.Equal(kinds, want) {
		t.Fatalf("newest = %v, want %v (newest first, at most 3)", kinds, want)
	}
	if r.newest()[0].Time.IsZero() {
		t.Fatal("an event added without a time has none")
	}
}
