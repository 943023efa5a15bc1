package beamio

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/util/reflectx"

	"github.com/tabuladb/tabula/storage/client"
)

// countingDialer dials real (lazy) clients of an address nothing listens
// on and counts the dials and the closes it sees through the pool.
type countingDialer struct {
	mu    sync.Mutex
	dials map[Table]int
	fail  error
}

func (d *countingDialer) dial(t Table) (*client.Client, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.fail != nil {
		return nil, d.fail
	}
	if d.dials == nil {
		d.dials = map[Table]int{}
	}
	d.dials[t]++
	return client.Dial(t.Addr, client.Options{})
}

func (d *countingDialer) count(t Table) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.dials[poolKey(t)]
}

func TestClientPoolShares(t *testing.T) {
	d := &countingDialer{}
	p := &clientPool{linger: time.Hour, dial: d.dial}
	a := Table{Addr: "127.0.0.1:1", Table: "t1"}
	b := Table{Addr: "127.0.0.1:1", Table: "t2"}                                    // same server, another table
	other := Table{Addr: "127.0.0.1:1", Table: "t1", Auth: Credentials{Token: "x"}} // other credentials

	c1, err := p.acquire(a)
	if err != nil {
		t.Fatal(err)
	}
	c2, err := p.acquire(b)
	if err != nil {
		t.Fatal(err)
	}
	c3, err := p.acquire(other)
	if err != nil {
		t.Fatal(err)
	}
	if c1 != c2 {
		t.Fatal("two tables of one server got two connections")
	}
	if c3 == c1 {
		t.Fatal("other credentials got the same connection")
	}
	if d.count(a) != 1 || d.count(other) != 1 {
		t.Fatalf("dials: %v, want one per server and credentials", d.dials)
	}

	// Released and acquired again within the linger: the same client.
	p.release(a, c1)
	p.release(b, c2)
	c4, err := p.acquire(a)
	if err != nil {
		t.Fatal(err)
	}
	if c4 != c1 || d.count(a) != 1 {
		t.Fatalf("re-acquired within the linger: new client %v, dials %d", c4 != c1, d.count(a))
	}
	p.release(a, c4)
	p.release(a, c4) // an extra release is ignored, not a negative count
	p.release(other, c3)
	if pc := p.conns[poolKey(a)]; pc == nil || pc.refs != 0 {
		t.Fatalf("after every release: %+v", pc)
	}
}

func TestClientPoolClosesAfterLinger(t *testing.T) {
	d := &countingDialer{}
	p := &clientPool{linger: 10 * time.Millisecond, dial: d.dial}
	a := Table{Addr: "127.0.0.1:1", Table: "t"}
	c1, err := p.acquire(a)
	if err != nil {
		t.Fatal(err)
	}
	p.release(a, c1)
	deadline := time.Now().Add(10 * time.Second)
	for {
		p.mu.Lock()
		_, open := p.conns[poolKey(a)]
		p.mu.Unlock()
		if !open {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the unused client was never closed")
		}
		time.Sleep(5 * time.Millisecond)
	}
	c2, err := p.acquire(a)
	if err != nil {
		t.Fatal(err)
	}
	if c2 == c1 || d.count(a) != 2 {
		t.Fatalf("after the linger: same client %v, dials %d; want a new dial", c2 == c1, d.count(a))
	}
	p.release(a, c2)

	// No linger: the last release closes at once.
	p = &clientPool{dial: d.dial}
	c3, err := p.acquire(a)
	if err != nil {
		t.Fatal(err)
	}
	p.release(a, c3)
	if len(p.conns) != 0 {
		t.Fatalf("pool without linger kept %d clients", len(p.conns))
	}
}

// TestSharedClient: SharedClient hands out one connection per server and
// credentials for each kind of scan, and its release gives it back once
// however often it is called.
func TestSharedClient(t *testing.T) {
	tab := Table{Addr: "127.0.0.1:2", Table: "shared"} // nothing listens: clients dial lazily
	plain1, release1, err := SharedClient(tab, false)
	if err != nil {
		t.Fatal(err)
	}
	plain2, release2, err := SharedClient(Table{Addr: tab.Addr, Table: "other"}, false)
	if err != nil {
		t.Fatal(err)
	}
	reusing, release3, err := SharedClient(tab, true)
	if err != nil {
		t.Fatal(err)
	}
	if plain1 != plain2 {
		t.Fatal("two acquisitions of one server got two connections")
	}
	if reusing == plain1 {
		t.Fatal("the buffer-reusing connection is the plain one: its scans' rows would be overwritten under Read")
	}
	refs := func(p *clientPool) int {
		p.mu.Lock()
		defer p.mu.Unlock()
		pc := p.conns[poolKey(tab)]
		if pc == nil {
			return -1
		}
		return pc.refs
	}
	if refs(sharedClients) != 2 || refs(sharedReusingClients) != 1 {
		t.Fatalf("references: plain %d, reusing %d; want 2 and 1", refs(sharedClients), refs(sharedReusingClients))
	}
	release1()
	release1() // a second call gives nothing back twice
	if refs(sharedClients) != 1 {
		t.Fatalf("after releasing one of two twice: %d references, want 1", refs(sharedClients))
	}
	release2()
	release3()
	if refs(sharedClients) != 0 || refs(sharedReusingClients) != 0 {
		t.Fatalf("after every release: plain %d, reusing %d references", refs(sharedClients), refs(sharedReusingClients))
	}
}

func TestClientPoolDialError(t *testing.T) {
	boom := errors.New("boom")
	p := &clientPool{linger: time.Hour, dial: (&countingDialer{fail: boom}).dial}
	if _, err := p.acquire(Table{Addr: "127.0.0.1:1", Table: "t"}); !errors.Is(err, boom) {
		t.Fatalf("acquire = %v, want the dial's error", err)
	}
	if len(p.conns) != 0 {
		t.Fatal("a failed dial left an entry")
	}
}

// TestCodersHaveGeneratedCallers: the element coders are registered with
// the SDK's register package, so that the SDK calls them without
// reflection.
func TestCodersHaveGeneratedCallers(t *testing.T) {
	for name, fn := range map[string]any{"encodeRow": encodeRow, "encodeRowMutation": encodeRowMutation, "encodeFailed": encodeFailed} {
		if _, ok := reflectx.MakeFunc(fn).(reflectx.Func1x1); !ok {
			t.Errorf("%s is called through reflection", name)
		}
	}
	for name, fn := range map[string]any{"decodeRow": decodeRow, "decodeRowMutation": decodeRowMutation, "decodeFailed": decodeFailed} {
		if _, ok := reflectx.MakeFunc(fn).(reflectx.Func1x2); !ok {
			t.Errorf("%s is called through reflection", name)
		}
	}
}
