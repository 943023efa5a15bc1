// Package cutproxy is a TCP proxy a test can cut: it forwards connections
// to a target until Cut(true), which drops every connection and refuses new
// ones, and Cut(false) heals it. Tests use it to cut one process off from
// another (a master from Consul, a session from its agent) while both keep
// running.
package cutproxy

import (
	"io"
	"net"
	"sync"
	"testing"
)

// Proxy forwards TCP connections from its own loopback address to a
// target.
type Proxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	isCut  bool
	conns  map[net.Conn]bool
}

// New starts a proxy to target on a loopback port; it stops, cutting every
// connection, when the test ends.
func New(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]bool{}}
	t.Cleanup(func() { ln.Close(); p.Cut(true) })
	go p.serve()
	return p
}

// Addr is the proxy's address, host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Cut(true) drops every connection and refuses new ones; Cut(false)
// accepts them again.
func (p *Proxy) Cut(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.isCut = on
	if on {
		for c := range p.conns {
			c.Close()
		}
		clear(p.conns)
	}
}

// track records open connections; while cut it closes them instead.
func (p *Proxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.isCut {
		for _, c := range cs {
			c.Close()
		}
		return false
	}
	for _, c := range cs {
		p.conns[c] = true
	}
	return true
}

func (p *Proxy) serve() {
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(in) {
			continue
		}
		go func() {
			out, err := net.Dial("tcp", p.target)
			if err != nil {
				in.Close()
				return
			}
			if !p.track(out) {
				in.Close()
				return
			}
			go func() { _, _ = io.Copy(out, in); out.Close() }()
			_, _ = io.Copy(in, out)
			in.Close()
		}()
	}
}
