package beamio

import (
	"sync"
	"time"

	"github.com/tabuladb/tabula/storage/client"
)

// clientLinger is how long a shared connection stays open after its last
// user released it: the DoFns of a pipeline's stages (a Read's splitting
// stage and its reading stage are two instances, set up one after the
// other) and the next pipeline run by the same worker process pick it up
// instead of dialing and handshaking again.
const clientLinger = 10 * time.Second

// clientPool shares one client.Client per server and credentials among
// the DoFn instances of a worker process. The Beam SDK sets up a DoFn
// instance per stage and per concurrent bundle; each dialing its own
// connection costs a TCP (and TLS) handshake and the server a
// connection, for a client that is safe for concurrent use anyway.
type clientPool struct {
	mu     sync.Mutex
	linger time.Duration
	conns  map[Table]*pooledClient
	dial   func(Table) (*client.Client, error)
}

type pooledClient struct {
	c     *client.Client
	refs  int
	timer *time.Timer // closes c when it has lingered unused; nil while in use
}

// sharedClients is the process's pool; sharedReusingClients holds the
// clients whose scans reuse their buffers (client.Options.ReuseScanBuffers),
// which only callers that are done with a row before the next may share.
var (
	sharedClients        = &clientPool{linger: clientLinger, dial: Table.Dial}
	sharedReusingClients = &clientPool{linger: clientLinger, dial: Table.dialReusing}
)

// SharedClient returns the worker process's shared connection to t's
// server with t's credentials, dialing it on first use, and the function
// that gives it back, to be called exactly once when the caller is done
// with it (a DoFn's Teardown). Read, Write and the pipelines' own DoFns
// share it instead of each instance dialing, handshaking and holding a
// connection of its own; a released connection lingers for the next
// instance or pipeline of the process (clientLinger). The client must
// not be closed. reuseScanBuffers selects the connection whose scans
// reuse their buffers (client.Options.ReuseScanBuffers: a scanned row
// is valid only until the scanner's next row), for callers that copy
// what they keep of each row.
func SharedClient(t Table, reuseScanBuffers bool) (*client.Client, func(), error) {
	p := sharedClients
	if reuseScanBuffers {
		p = sharedReusingClients
	}
	c, err := p.acquire(t)
	if err != nil {
		return nil, nil, err
	}
	var once sync.Once
	return c, func() { once.Do(func() { p.release(t, c) }) }, nil
}

// poolKey is t without its table: one connection serves every table of a
// server reached with the same project, instance and credentials.
func poolKey(t Table) Table {
	t.Table = ""
	return t
}

// acquire returns the shared client of t's server and credentials,
// dialing it when there is none; every acquire must be matched by one
// release of the same client. Credentials are read when the client is
// dialed: a token file rewritten later takes effect once the connection
// has lingered out.
func (p *clientPool) acquire(t Table) (*client.Client, error) {
	k := poolKey(t)
	p.mu.Lock()
	defer p.mu.Unlock()
	if pc, ok := p.conns[k]; ok {
		if pc.timer != nil {
			pc.timer.Stop()
			pc.timer = nil
		}
		pc.refs++
		return pc.c, nil
	}
	c, err := p.dial(k)
	if err != nil {
		return nil, err
	}
	if p.conns == nil {
		p.conns = map[Table]*pooledClient{}
	}
	p.conns[k] = &pooledClient{c: c, refs: 1}
	return c, nil
}

// release gives back a client acquire returned. The last release of a
// client leaves it open for the pool's linger, then closes it unless it
// was acquired again meanwhile.
func (p *clientPool) release(t Table, c *client.Client) {
	k := poolKey(t)
	p.mu.Lock()
	defer p.mu.Unlock()
	pc, ok := p.conns[k]
	if !ok || pc.c != c || pc.refs == 0 {
		return // not (or no longer) this pool's: nothing to give back
	}
	pc.refs--
	if pc.refs > 0 {
		return
	}
	if p.linger <= 0 {
		delete(p.conns, k)
		pc.c.Close()
		return
	}
	pc.timer = time.AfterFunc(p.linger, func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if cur, ok := p.conns[k]; ok && cur == pc && pc.refs == 0 && pc.timer != nil {
			delete(p.conns, k)
			pc.c.Close()
		}
	})
}
