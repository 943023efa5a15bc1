package shuffle

import (
	"bytes"
	"testing"
)

// FuzzReader: any bytes — a map output fetched from another process may be
// damaged — read as records or fail with ErrCorrupt, never panic; what
// AppendRecord wrote reads back.
func FuzzReader(f *testing.F) {
	f.Add(AppendRecord(AppendRecord(nil, []byte("key"), []byte("value")), nil, nil))
	f.Add([]byte{0x80})
	f.Add([]byte{3, 'a', 'b'})
	f.Fuzz(func(t *testing.T, data []byte) {
		r := NewReader(bytes.NewReader(data))
		var again []byte
		for r.Next() {
			again = AppendRecord(again, r.Key(), r.Value())
		}
		if r.Err() == nil && !bytes.Equal(again, data) {
			// Varints may be written non-minimally by others; then the
			// re-encoding is shorter but must read back the same records.
			r2 := NewReader(bytes.NewReader(again))
			r1 := NewReader(bytes.NewReader(data))
			for r1.Next() {
				if !r2.Next() || !bytes.Equal(r1.Key(), r2.Key()) || !bytes.Equal(r1.Value(), r2.Value()) {
					t.Fatalf("re-encoding differs")
				}
			}
		}
	})
}
