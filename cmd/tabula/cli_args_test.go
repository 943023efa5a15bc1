package main

import (
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
)

func TestParseGCPolicy(t *testing.T) {
	day := 24 * time.Hour
	cases := []struct {
		in   string
		want string // bigtable.GCPolicy.String(), or "error"
	}{
		{"maxversions=3", bigtable.MaxVersionsPolicy(3).String()},
		{"maxage=1d", bigtable.MaxAgePolicy(day).String()},
		{"maxage=1d12h", bigtable.MaxAgePolicy(36 * time.Hour).String()},
		{"maxage=90m", bigtable.MaxAgePolicy(90 * time.Minute).String()},
		{"never", bigtable.NoGcPolicy().String()},
		{"maxage=1d or maxversions=2", bigtable.UnionPolicy(bigtable.MaxAgePolicy(day), bigtable.MaxVersionsPolicy(2)).String()},
		{"maxage=1d and maxversions=2", bigtable.IntersectionPolicy(bigtable.MaxAgePolicy(day), bigtable.MaxVersionsPolicy(2)).String()},
		{"maxversions=1 or maxage=2d and maxversions=5", bigtable.UnionPolicy(bigtable.MaxVersionsPolicy(1),
			bigtable.IntersectionPolicy(bigtable.MaxAgePolicy(2*day), bigtable.MaxVersionsPolicy(5))).String()},
		{"(maxversions=1 or maxage=2d) and maxversions=5", bigtable.IntersectionPolicy(
			bigtable.UnionPolicy(bigtable.MaxVersionsPolicy(1), bigtable.MaxAgePolicy(2*day)), bigtable.MaxVersionsPolicy(5)).String()},
		{"MAXVERSIONS=2 OR maxage=1h", bigtable.UnionPolicy(bigtable.MaxVersionsPolicy(2), bigtable.MaxAgePolicy(time.Hour)).String()},
		{"", "error"},
		{"maxversions=0", "error"},
		{"maxversions=x", "error"},
		{"maxage=forever", "error"},
		{"maxage=0s", "error"},
		{"maxversions=1 or", "error"},
		{"(maxversions=1", "error"},
		{"maxversions=1)", "error"},
		{"maxversions=1 xor maxage=1d", "error"},
		{"size=3", "error"},
	}
	for _, c := range cases {
		got, err := parseGCPolicy(c.in)
		if c.want == "error" {
			if err == nil {
				t.Errorf("parseGCPolicy(%q) = %v, want an error", c.in, got)
			}
			continue
		}
		if err != nil {
			t.Errorf("parseGCPolicy(%q): %v", c.in, err)
			continue
		}
		if got.String() != c.want {
			t.Errorf("parseGCPolicy(%q) = %s, want %s", c.in, got, c.want)
		}
	}
}

func TestParseFamilies(t *testing.T) {
	got, err := parseFamilies("contents:maxversions=3,anchor, language:maxage=1d or maxversions=1")
	if err != nil {
		t.Fatal(err)
	}
	want := []struct{ name, policy string }{
		{"contents", bigtable.MaxVersionsPolicy(3).String()},
		{"anchor", ""},
		{"language", bigtable.UnionPolicy(bigtable.MaxAgePolicy(24*time.Hour), bigtable.MaxVersionsPolicy(1)).String()},
	}
	if len(got) != len(want) {
		t.Fatalf("parseFamilies gave %d families, want %d: %+v", len(got), len(want), got)
	}
	for i, w := range want {
		if got[i].Name != w.name || got[i].Policy.String() != w.policy {
			t.Errorf("family %d = %s:%s, want %s:%s", i, got[i].Name, got[i].Policy, w.name, w.policy)
		}
	}
	aggs, err := parseFamilies("n:agg=sum,u:agg=hll:maxversions=1,m:agg=min,x:agg=max,p:maxversions=2")
	if err != nil {
		t.Fatal(err)
	}
	for i, w := range []struct{ typ, policy string }{{"sum(int64)", ""}, {"hll(int64)", "versions() > 1"}, {"min(int64)", ""}, {"max(int64)", ""}, {"", "versions() > 2"}} {
		if got := typeName(aggs[i].Type); got != w.typ || aggs[i].Policy.String() != w.policy {
			t.Errorf("family %s: type %q policy %q, want %q %q", aggs[i].Name, got, aggs[i].Policy, w.typ, w.policy)
		}
	}
	for _, bad := range []string{"", ",", "f1,f1", "bad name", "f:maxversions=0", "-f", "f:agg=avg", "f:agg=sum:maxversions=0"} {
		if _, err := parseFamilies(bad); err == nil {
			t.Errorf("parseFamilies(%q) succeeded, want an error", bad)
		}
	}
}

func TestParseColumns(t *testing.T) {
	got, err := parseColumns("anchor:cnnsi.com,language,contents:")
	if err != nil {
		t.Fatal(err)
	}
	want := []columnSpec{{"anchor", "cnnsi.com"}, {"language", ""}, {"contents", ""}}
	if len(got) != len(want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("column %d = %+v, want %+v", i, got[i], want[i])
		}
	}
	for _, bad := range []string{"", ":q", "f:(", "(:q"} {
		if _, err := parseColumns(bad); err == nil {
			t.Errorf("parseColumns(%q) succeeded, want an error", bad)
		}
	}
}

func TestParseCellSet(t *testing.T) {
	cases := []struct {
		in   string
		want cellSet
		err  bool
	}{
		{in: "f:c=v", want: cellSet{"f", "c", bigtable.ServerTime, "v"}},
		{in: "f:c@1700000000000000=v", want: cellSet{"f", "c", 1700000000000000, "v"}},
		{in: "f:c=a=b", want: cellSet{"f", "c", bigtable.ServerTime, "a=b"}},
		{in: "f:=empty qualifier", want: cellSet{"f", "", bigtable.ServerTime, "empty qualifier"}},
		{in: "f:a@b@5=", want: cellSet{"f", "a@b", 5, ""}},
		{in: "f:c", err: true},
		{in: "fc=v", err: true},
		{in: "f:c@x=v", err: true},
		{in: "f:c@-3=v", err: true},
		{in: "bad fam:c=v", err: true},
	}
	for _, c := range cases {
		got, err := parseCellSet(c.in)
		if c.err {
			if err == nil {
				t.Errorf("parseCellSet(%q) = %+v, want an error", c.in, got)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("parseCellSet(%q) = %+v, %v; want %+v", c.in, got, err, c.want)
		}
	}
}

func TestParseKeyValuesAndRange(t *testing.T) {
	kv, err := parseKeyValues([]string{"prefix=com.", "count=10", "columns=a:b=c"}, "prefix", "count", "columns")
	if err != nil {
		t.Fatal(err)
	}
	if kv["prefix"] != "com." || kv["count"] != "10" || kv["columns"] != "a:b=c" {
		t.Errorf("parseKeyValues = %v", kv)
	}
	for _, bad := range [][]string{{"prefx=a"}, {"prefix"}, {"=a"}, {"prefix=a", "prefix=b"}} {
		if _, err := parseKeyValues(bad, "prefix", "count"); err == nil {
			t.Errorf("parseKeyValues(%q) succeeded, want an error", bad)
		}
	}
	rangeCases := []struct {
		kv   map[string]string
		want string // RowRange.String(), or "error"
	}{
		{map[string]string{"prefix": "com.cnn"}, bigtable.PrefixRange("com.cnn").String()},
		{map[string]string{"start": "a", "end": "m"}, bigtable.NewRange("a", "m").String()},
		{map[string]string{"start": "a"}, bigtable.InfiniteRange("a").String()},
		{map[string]string{}, bigtable.InfiniteRange("").String()},
		{map[string]string{"prefix": "a", "start": "b"}, "error"},
		{map[string]string{"start": "m", "end": "a"}, "error"},
	}
	for _, c := range rangeCases {
		got, err := readRange(c.kv)
		if c.want == "error" {
			if err == nil {
				t.Errorf("readRange(%v) = %v, want an error", c.kv, got)
			}
			continue
		}
		if err != nil || got.String() != c.want {
			t.Errorf("readRange(%v) = %v, %v; want %s", c.kv, got, err, c.want)
		}
	}
	if _, err := readFilter(map[string]string{"versions": "0"}); err == nil {
		t.Error("readFilter accepted versions=0")
	}
	if f, err := readFilter(map[string]string{}); f != nil || err != nil {
		t.Errorf("readFilter of nothing = %v, %v; want nil, nil", f, err)
	}
}

func TestFormatValue(t *testing.T) {
	if got := formatValue([]byte("hi\n"), 10); got != `"hi\n"` {
		t.Errorf("formatValue = %s", got)
	}
	long := []byte(strings.Repeat("x", 300))
	got := formatValue(long, 5)
	if got != `"xxxxx"... (300 bytes)` {
		t.Errorf("formatValue of a long value = %s", got)
	}
	if got := formatValue(long, 0); len(got) != 302 {
		t.Errorf("formatValue with no limit cut the value: %d bytes", len(got))
	}
}

func TestParseLocalityGroupArgs(t *testing.T) {
	req, err := parseLocalityGroupArgs("projects/p/instances/i/tables/t", "meta",
		[]string{"families=anchor,language", "inmemory=true", "compression=zstd", "blocksize=65536"})
	if err != nil {
		t.Fatal(err)
	}
	if req.GetTable() != "projects/p/instances/i/tables/t" || req.GetGroup() != "meta" ||
		strings.Join(req.GetFamilies(), ",") != "anchor,language" || !req.GetInMemory() ||
		compressionName(req.GetCompression()) != "zstd" || req.GetBlockSize() != 65536 {
		t.Errorf("request = %v", req)
	}
	req, err = parseLocalityGroupArgs("t", "g", nil)
	if err != nil || req.InMemory != nil || req.GetCompression() != 0 || req.GetBlockSize() != 0 || len(req.GetFamilies()) != 0 {
		t.Errorf("empty arguments: %v, %v; want a request that changes nothing but the group", req, err)
	}
	// inmemory=false is sent, so that it turns an in-memory group off.
	req, err = parseLocalityGroupArgs("t", "g", []string{"inmemory=false"})
	if err != nil || req.InMemory == nil || req.GetInMemory() {
		t.Errorf("inmemory=false: %v, %v; want in_memory set to false", req, err)
	}
	for _, bad := range [][]string{
		{"inmemory=maybe"}, {"compression=lz4"}, {"blocksize=0"}, {"blocksize=999999999999"},
		{"families=bad name"}, {"color=red"}, {"inmemory"},
	} {
		if _, err := parseLocalityGroupArgs("t", "g", bad); err == nil {
			t.Errorf("parseLocalityGroupArgs(%q) succeeded, want an error", bad)
		}
	}
	if _, err := parseLocalityGroupArgs("t", "bad group", nil); err == nil {
		t.Error("a bad group name was accepted")
	}
}
