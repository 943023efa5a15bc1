package commitlog

import (
	"bytes"
	"context"
	"testing"

	"github.com/tabuladb/tabula/storage/tabletdesc"
)

// TestEncodedFrameIsAppendsFrame: a record encoded ahead and given its
// sequence number at append time is the same bytes as the record encoded
// whole, for records exercising every field.
func TestEncodedFrameIsAppendsFrame(t *testing.T) {
	for i, rec := range records(51, 300) {
		e := Encode(rec.Tablet, rec.Mutation)
		got := e.appendFrame([]byte("x"), rec.FirstSeq)
		want := appendRecordFrame([]byte("x"), &rec)
		if !bytes.Equal(got, want) {
			t.Fatalf("record %d: encoded ahead %x, whole %x", i, got, want)
		}
		if e.payloadLen(rec.FirstSeq) != len(want)-1-frameHeaderLen {
			t.Fatalf("record %d: payloadLen %d, frame payload %d", i, e.payloadLen(rec.FirstSeq), len(want)-1-frameHeaderLen)
		}
		e.Release()
	}
}

// TestAppendEncoded mixes Append and AppendEncoded: replay returns every
// record at its position, in both modes.
func TestAppendEncoded(t *testing.T) {
	forModes(t, func(t *testing.T, m logMode) {
		opts := m.options(t)
		opts.SegmentBytes = 8 << 10
		l := openLog(t, opts)
		recs := records(52, 120)
		commits := make([]*Commit, len(recs))
		for i, rec := range recs {
			if i%3 == 0 {
				commits[i] = l.Append(rec)
				continue
			}
			e := Encode(rec.Tablet, rec.Mutation)
			commits[i] = l.AppendEncoded(e, rec.FirstSeq)
			e.Release()
		}
		pos := make([]tabletdesc.LogPosition, len(recs))
		for i, c := range commits {
			if err := c.Wait(context.Background()); err != nil {
				t.Fatal(err)
			}
			pos[i] = c.Pos
		}
		l.Close()
		got, _, err := replayAll(t, opts, tabletdesc.LogPosition{})
		if err != nil {
			t.Fatal(err)
		}
		checkReplayed(t, got, recs, pos)
		if err := l.AppendEncoded(Encode("t", recs[0].Mutation), 1).Wait(context.Background()); err != ErrClosed {
			t.Fatalf("AppendEncoded after Close: %v, want ErrClosed", err)
		}
	})
}
