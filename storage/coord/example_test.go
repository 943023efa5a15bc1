package coord_test

import (
	"context"
	"fmt"
	"time"

	"github.com/tabuladb/tabula/storage/coord"
)

// The paper's failure detection, on the in-process service: a tablet server
// registers under servers/, its session dies, and the master declares it
// dead only after taking its lock, then deletes the key.
func Example_failureDetection() {
	ctx := context.Background()
	clock := coord.NewFakeClock()
	svc := coord.NewLocal(coord.LocalConfig{Clock: clock, LockDelay: 5 * time.Second})
	defer svc.Close()

	// The master watches servers/ for arrivals and deaths.
	events, _ := svc.Watch(ctx, coord.PrefixServers)

	// A tablet server registers: a session, and a lock on its key whose
	// value is its address.
	ts, _ := svc.NewSession(ctx, coord.SessionOptions{Name: "tabletserver", ManualRenew: true})
	lock, _ := ts.TryLock(ctx, coord.ServerKey("ts1"), []byte("10.0.0.1:7000"))
	ev := <-events
	fmt.Println("arrival:", ev.Entry.Key, string(ev.Entry.Value), ev.Entry.Session == ts.ID())

	// It stops renewing (a crash, a partition): after a TTL its lease
	// lapses, it stops serving, and the service releases its key.
	clock.Advance(ts.TTL())
	<-lock.Lost()
	fmt.Println("server lease valid:", ts.Valid())
	ev = <-events
	fmt.Println("released:", ev.Entry.Key, "locked:", ev.Entry.Session != "")

	// The master takes the lock (after the lock-delay), then deletes the
	// key: only now is the server dead and its tablets reassignable.
	m, _ := svc.NewSession(ctx, coord.SessionOptions{Name: "master"})
	_, err := m.TryLock(ctx, coord.ServerKey("ts1"), []byte("master"))
	fmt.Println("during lock-delay:", err)
	clock.Advance(5 * time.Second)
	if _, err := m.TryLock(ctx, coord.ServerKey("ts1"), []byte("master")); err != nil {
		fmt.Println(err)
	}
	ent, _ := svc.Get(ctx, coord.ServerKey("ts1"))
	_ = svc.DeleteCAS(ctx, coord.ServerKey("ts1"), ent.ModifyIndex)
	<-events // the master's own lock
	ev = <-events
	fmt.Println("dead:", ev.Kind, ev.Entry.Key)
	// Output:
	// arrival: servers/ts1 10.0.0.1:7000 true
	// server lease valid: false
	// released: servers/ts1 locked: false
	// during lock-delay: coord: lock held or in lock-delay
	// dead: delete servers/ts1
}
