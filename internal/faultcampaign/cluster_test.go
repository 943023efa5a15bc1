package faultcampaign

import (
	"net"
	"strconv"
	"testing"
)

// TestFreePortBelowEphemeralRange checks that the campaign's ports come
// from below the kernel's ephemeral range, are distinct, and can be bound.
func TestFreePortBelowEphemeralRange(t *testing.T) {
	low, high := belowEphemeralRange()
	if low < 1024 || low >= high {
		t.Fatalf("range [%d, %d) is empty or privileged", low, high)
	}
	seen := map[int]bool{}
	for range 50 {
		p, err := freePort()
		if err != nil {
			t.Fatal(err)
		}
		if p < low || p >= high {
			t.Fatalf("port %d outside [%d, %d)", p, low, high)
		}
		if seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		seen[p] = true
	}
	// Each is free for the caller to bind.
	for p := range seen {
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			t.Fatalf("port %d not bindable: %v", p, err)
		}
		defer l.Close()
	}
}
