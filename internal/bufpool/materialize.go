package bufpool

import (
	"bytes"

	"google.golang.org/grpc/mem"
)

// Materialize copies data into one new buffer, as data.Materialize does
// but without zeroing the buffer first: bytes.Join allocates its result
// uninitialized, since it overwrites every byte. (A large buffer is
// otherwise cleared in full by the runtime before the copy: as many bytes
// zeroed as received.) The result shares nothing with data, which may be
// freed at once.
func Materialize(data mem.BufferSlice) []byte {
	if len(data) == 1 {
		return bytes.Clone(data[0].ReadOnlyData())
	}
	var parts [][]byte
	if len(data) <= 128 {
		parts = make([][]byte, 0, 128) // a 1 MiB message in 16 KiB frames fits: no allocation
	}
	for _, b := range data {
		parts = append(parts, b.ReadOnlyData())
	}
	return bytes.Join(parts, nil)
}
