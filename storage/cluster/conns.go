package cluster

import (
	"crypto/tls"
	"fmt"
	"net"
	"sync"

	"google.golang.org/grpc"

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
	return &conns{m: make(map[string]*grpc.ClientConn), tls: tlsClient, opts: opts}
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
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(client.MaxMessageSize), grpc.MaxCallSendMsgSize(client.MaxMessageSize))}, c.opts...)...)
	if err != nil {
		return nil, fmt.Errorf("cluster: connect to %s: %w", addr, err)
	}
	c.m[addr] = cc
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
