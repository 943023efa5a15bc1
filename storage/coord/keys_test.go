package coord

import "testing"

func TestServerRecordRoundTrip(t *testing.T) {
	for _, r := range []ServerRecord{
		{Addr: "127.0.0.1:8086"},
		{Addr: "10.0.0.7:8086", Succeeds: "10.0.0.7:8086/4f2a9c01b7d3"},
	} {
		if got := ParseServerRecord(r.Encode()); got != r {
			t.Errorf("%+v came back as %+v", r, got)
		}
	}
	// A server that knows nothing of Succeeds writes its address alone,
	// and a record without Succeeds is written so.
	if got := string((ServerRecord{Addr: "h:1"}).Encode()); got != "h:1" {
		t.Errorf("encoded %q, want the address alone", got)
	}
	if got := ParseServerRecord([]byte("h:1")); got != (ServerRecord{Addr: "h:1"}) {
		t.Errorf("a plain address parsed as %+v", got)
	}
}
