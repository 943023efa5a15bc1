package client

import (
	"google.golang.org/grpc/mem"

	"github.com/tabuladb/tabula/internal/bufpool"
)

// framePool is the buffer pool of the connections a client dials. gRPC's
// transport takes from it the buffer it reads each HTTP/2 data frame into
// (io.ReadFull: every byte of it overwritten before use) and puts it back
// once the message is decoded; its other users (compressing and
// decompressing messages, which this client does not ask for) also hand
// on only bytes they wrote (mem.ReadAll slices to what it read), and
// messages are marshalled into gRPC's default pool. gRPC's default pool
// clears every buffer it hands out again, for users that might read
// before writing: for a scan, as many bytes cleared as received (about
// 3 ms of client CPU per 100 MB). This pool does not clear; its tiers are
// gRPC's default ones from 4 KiB up (frames are at most 16 KiB).
var framePool mem.BufferPool = bufpool.NewDirty(4<<10, 16<<10, 32<<10, 1<<20)
