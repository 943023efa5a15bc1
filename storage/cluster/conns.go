package cluster

import (
	"fmt"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/tabuladb/tabula/storage/client"
)

// conns caches one gRPC connection per address.
type conns struct {
	mu sync.Mutex
	m  map[string]*grpc.ClientConn
}

func newConns() *conns { return &conns{m: make(map[string]*grpc.ClientConn)} }

// get returns the connection to addr, dialing it (lazily: gRPC connects on
// the first call) if needed.
func (c *conns) get(addr string) (grpc.ClientConnInterface, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cc, ok := c.m[addr]; ok {
		return cc, nil
	}
	cc, err := grpc.NewClient(addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(client.MaxMessageSize), grpc.MaxCallSendMsgSize(client.MaxMessageSize)))
	if err != nil {
		return nil, fmt.Errorf("cluster: connect to %s: %w", addr, err)
	}
	c.m[addr] = cc
	return cc, nil
}

func (c *conns) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for a, cc := range c.m {
		_ = cc.Close()
		delete(c.m, a)
	}
}
