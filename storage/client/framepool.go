package client

import (
	"google.golang.org/grpc/mem"

	"github.com/tabuladb/tabula/internal/bufpool"
)

// framePool is the buffer pool of the connections a client dials: the
// frame pool the tablet servers use too (bufpool.Frames says why it need
// not clear its buffers).
var framePool mem.BufferPool = bufpool.Frames
