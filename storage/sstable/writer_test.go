package sstable

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/tabuladb/tabula/storage/cell"
)

func key(row string, seq uint64) []byte {
	return cell.EncodeKey(cell.Key{Row: []byte(row), Family: "f", Qualifier: []byte("q"), Timestamp: 10, Seq: seq, Kind: cell.KindSet})
}

func TestWriterRejects(t *testing.T) {
	for _, tc := range []struct {
		name string
		keys [][]byte
		opts WriterOptions
	}{
		{"out of order", [][]byte{key("b", 1), key("a", 1)}, WriterOptions{}},
		{"duplicate", [][]byte{key("a", 1), key("a", 1)}, WriterOptions{}},
		{"empty key", [][]byte{{}}, WriterOptions{}},
		{"unterminated row", [][]byte{[]byte("row without terminator")}, WriterOptions{}},
		{"bad kind", [][]byte{append(key("a", 1)[:len(key("a", 1))-1], 9)}, WriterOptions{}},
		{"unknown compression", [][]byte{key("a", 1)}, WriterOptions{Compression: 7}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			w := NewWriter(&buf, tc.opts)
			var err error
			for _, k := range tc.keys {
				if err = w.Add(k, nil); err != nil {
					break
				}
			}
			if err == nil {
				t.Fatal("Add accepted")
			}
		})
	}
}

func TestWriterAfterFinish(t *testing.T) {
	var buf bytes.Buffer
	w := NewWriter(&buf, WriterOptions{})
	if err := w.Add(key("a", 1), []byte("v")); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Finish(); err != nil {
		t.Fatal(err)
	}
	if err := w.Add(key("b", 1), nil); !errors.Is(err, ErrWriterClosed) {
		t.Fatalf("Add after Finish: %v", err)
	}
	if _, err := w.Finish(); !errors.Is(err, ErrWriterClosed) {
		t.Fatalf("Finish twice: %v", err)
	}
}

type failingWriter struct{ n int }

func (f *failingWriter) Write(p []byte) (int, error) {
	if f.n -= len(p); f.n < 0 {
		return 0, errDisk
	}
	return len(p), nil
}

func TestWriterWriteErrorSticks(t *testing.T) {
	w := NewWriter(&failingWriter{n: 100}, WriterOptions{BlockSize: 256, Compression: NoCompression})
	var err error
	for i := uint64(0); err == nil && i < 1000; i++ {
		err = w.Add(key("row", 1000-i), bytes.Repeat([]byte("v"), 50))
	}
	if !errors.Is(err, errDisk) {
		t.Fatalf("Add over a failing writer: %v", err)
	}
	if _, err := w.Finish(); !errors.Is(err, errDisk) {
		t.Fatalf("Finish after a failed write: %v", err)
	}
}

func TestEstimatedSize(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	entries := randomEntries(rng, 3000, 10)
	for _, c := range []Compression{NoCompression, SnappyCompression} {
		var buf bytes.Buffer
		w := NewWriter(&buf, WriterOptions{Compression: c, BlockSize: 4096})
		if est := w.EstimatedSize(); est < footerLen {
			t.Fatalf("%v: empty writer estimates %d bytes", c, est)
		}
		prev := int64(0)
		for i, e := range entries {
			if err := w.Add(e.key, e.value); err != nil {
				t.Fatal(err)
			}
			est := w.EstimatedSize()
			// Grows with the data (a block flush may compress a little).
			if i%500 == 0 && est < prev {
				t.Fatalf("%v: estimate fell from %d to %d", c, prev, est)
			}
			prev = est
		}
		est := w.EstimatedSize()
		props, err := w.Finish()
		if err != nil {
			t.Fatal(err)
		}
		// Uncompressed, the estimate is close; compressed, it is an upper
		// bound within the pending block.
		if lo, hi := props.FileSize*9/10, props.FileSize*11/10+4096; est < lo || est > hi {
			t.Fatalf("%v: estimated %d bytes, file has %d", c, est, props.FileSize)
		}
	}
}
