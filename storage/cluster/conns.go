package cluster

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"

	"github.com/tabuladb/tabula/security/tlsconfig"
	"github.com/tabuladb/tabula/storage/client"
)

// conns caches one gRPC connection per address, dialed over TLS with the
// role's client config (plaintext when nil) and opts (the role's server
// token, AuthConfig.ServerToken).
type conns struct {
	mu   sync.Mutex
	m    map[string]*grpc.ClientConn
	tls  *tls.Config
	opts []grpc.DialOption
	// borrowed are connections set by alias: close leaves them open.
	borrowed map[string]bool
	// onBreak, once set (notifyBreaks), is called whenever a dialed
	// connection that was ready is no longer; the watchers run until
	// close.
	onBreak     atomic.Pointer[func()]
	watching    map[*grpc.ClientConn]bool
	stopWatches context.CancelFunc
	watchCtx    context.Context
	watches     sync.WaitGroup
}

// alias makes get(addr) return cc, which the caller owns: `tabula dev`'s
// roles reach each other's address over its in-memory connection.
func (c *conns) alias(addr string, cc *grpc.ClientConn) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.borrowed == nil {
		c.borrowed = make(map[string]bool)
	}
	c.m[addr] = cc
	c.borrowed[addr] = true
}

func newConns(tlsClient *tls.Config, opts ...grpc.DialOption) *conns {
	ctx, cancel := context.WithCancel(context.Background())
	return &conns{m: make(map[string]*grpc.ClientConn), tls: tlsClient, opts: opts,
		watching: make(map[*grpc.ClientConn]bool), watchCtx: ctx, stopWatches: cancel}
}

// notifyBreaks has fn called whenever one of the connections get dialed
// (before or after this call) loses its ready transport: the peer's
// process died or closed the connection. A master pokes its loop so, and
// a killed tablet server is Listed at once rather than at the next
// round's time. fn must not block.
func (c *conns) notifyBreaks(fn func()) {
	c.onBreak.Store(&fn)
	c.mu.Lock()
	defer c.mu.Unlock()
	for a, cc := range c.m {
		if !c.borrowed[a] {
			c.watchLocked(cc)
		}
	}
}

// watchLocked starts cc's watcher, if notifyBreaks asked for them and it
// has none. Called under c.mu.
func (c *conns) watchLocked(cc *grpc.ClientConn) {
	if c.onBreak.Load() == nil || c.watching[cc] || c.watchCtx.Err() != nil {
		return
	}
	c.watching[cc] = true
	c.watches.Go(func() {
		state := cc.GetState()
		for cc.WaitForStateChange(c.watchCtx, state) {
			next := cc.GetState()
			if state == connectivity.Ready && next != connectivity.Ready && next != connectivity.Shutdown {
				(*c.onBreak.Load())()
			}
			state = next
		}
	})
}

// get returns the connection to addr, dialing it (lazily: gRPC connects on
// the first call) if needed.
func (c *conns) get(addr string) (grpc.ClientConnInterface, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cc, ok := c.m[addr]; ok {
		return cc, nil
	}
	cc, err := grpc.NewClient(addr, append([]grpc.DialOption{
		tlsconfig.DialOption(c.tls),
		grpc.WithConnectParams(client.ReconnectParams),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(client.MaxMessageSize), grpc.MaxCallSendMsgSize(client.MaxMessageSize))}, c.opts...)...)
	if err != nil {
		return nil, fmt.Errorf("cluster: connect to %s: %w", addr, err)
	}
	c.m[addr] = cc
	c.watchLocked(cc)
	return cc, nil
}

// resetBackoff makes the connection to addr, if there is one, dial again
// at once instead of at the end of its reconnect back-off, and reports
// whether there was one.
func (c *conns) resetBackoff(addr string) bool {
	c.mu.Lock()
	cc, ok := c.m[addr]
	c.mu.Unlock()
	if ok {
		cc.ResetConnectBackoff()
	}
	return ok
}

func (c *conns) close() {
	c.stopWatches()
	c.watches.Wait()
	c.mu.Lock()
	defer c.mu.Unlock()
	for a, cc := range c.m {
		if !c.borrowed[a] {
			_ = cc.Close()
		}
		delete(c.m, a)
	}
}

// opsListener is the HTTP ops port's listener: TLS with the role's server
// config (the same certificate, and client certificates required when the
// gRPC port requires them), plaintext without one.
func opsListener(l net.Listener, r tlsconfig.Role) net.Listener {
	if r.Server == nil {
		return l
	}
	return tls.NewListener(l, r.Server)
}
