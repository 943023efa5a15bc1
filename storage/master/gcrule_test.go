package master

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/bigtable/admin/apiv2/adminpb"
	"github.com/tabuladb/tabula/storage/tabletdesc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

func versions(n int32) *adminpb.GcRule {
	return &adminpb.GcRule{Rule: &adminpb.GcRule_MaxNumVersions{MaxNumVersions: n}}
}
func age(d time.Duration) *adminpb.GcRule {
	return &adminpb.GcRule{Rule: &adminpb.GcRule_MaxAge{MaxAge: durationpb.New(d)}}
}
func union(r ...*adminpb.GcRule) *adminpb.GcRule {
	return &adminpb.GcRule{Rule: &adminpb.GcRule_Union_{Union: &adminpb.GcRule_Union{Rules: r}}}
}
func inter(r ...*adminpb.GcRule) *adminpb.GcRule {
	return &adminpb.GcRule{Rule: &adminpb.GcRule_Intersection_{Intersection: &adminpb.GcRule_Intersection{Rules: r}}}
}

func TestGCRuleRoundTrip(t *testing.T) {
	for _, r := range []*adminpb.GcRule{
		{}, versions(1), age(time.Hour), union(versions(2), age(time.Minute)),
		inter(versions(5), age(24*time.Hour)), union(inter(versions(1), age(time.Hour)), versions(10), union(age(time.Second))),
	} {
		p, err := gcPolicyFromProto("gc_rule", r)
		if err != nil {
			t.Fatalf("%v: %v", r, err)
		}
		if back := gcPolicyToProto(p); !proto.Equal(back, r) {
			t.Errorf("%v came back as %v", r, back)
		}
	}
	if p, err := gcPolicyFromProto("gc_rule", nil); err != nil || !p.IsZero() {
		t.Fatalf("nil rule: %+v %v", p, err)
	}
	// A policy with several parts (the engine's union) renders as a union.
	mixed := gcPolicyToProto(tabletdesc.GCPolicy{MaxVersions: 2, MaxAge: time.Hour})
	if !proto.Equal(mixed, union(versions(2), age(time.Hour))) {
		t.Fatalf("mixed policy as %v", mixed)
	}
}

// The engine applies the converted policies with Cloud Bigtable's meaning.
func TestGCRuleSemantics(t *testing.T) {
	now := time.Now().UnixMicro()
	old := now - (2 * time.Hour).Microseconds()
	p, _ := gcPolicyFromProto("r", inter(versions(1), age(time.Hour)))
	// Collected only when both hold: not the newest and older than an hour.
	if p.Collects(1, now, now) || p.Collects(0, old, now) || !p.Collects(1, old, now) {
		t.Fatal("intersection semantics")
	}
	p, _ = gcPolicyFromProto("r", union(versions(1), age(time.Hour)))
	if !p.Collects(1, now, now) || !p.Collects(0, old, now) || p.Collects(0, now, now) {
		t.Fatal("union semantics")
	}
}

func TestGCRuleErrors(t *testing.T) {
	deep := versions(1)
	for range maxGCRuleDepth + 2 {
		deep = union(deep)
	}
	for _, c := range []struct {
		r     *adminpb.GcRule
		field string
	}{
		{versions(0), "gc_rule.max_num_versions"},
		{age(0), "gc_rule.max_age"},
		{&adminpb.GcRule{Rule: &adminpb.GcRule_MaxAge{MaxAge: &durationpb.Duration{Seconds: -1}}}, "gc_rule.max_age"},
		{inter(), "gc_rule.intersection.rules"},
		{union(versions(1), inter(versions(-3))), "gc_rule.union.rules[1].intersection.rules[0].max_num_versions"},
		{deep, "nest"},
	} {
		_, err := gcPolicyFromProto("gc_rule", c.r)
		wantCode(t, fmt.Sprint(c.r), err, codes.InvalidArgument)
		if !strings.Contains(err.Error(), c.field) {
			t.Errorf("%v: error %q does not name %q", c.r, err, c.field)
		}
	}
}

// FuzzGCRule feeds GcRule messages decoded from arbitrary bytes to the
// converter: it never panics, and an accepted rule converts back to one
// that converts to the same policy.
func FuzzGCRule(f *testing.F) {
	for _, r := range []*adminpb.GcRule{
		{}, versions(3), age(time.Hour), union(versions(2), age(time.Minute)),
		inter(versions(5), union(age(24*time.Hour), versions(1))), inter(),
	} {
		b, err := proto.Marshal(r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var r adminpb.GcRule
		if proto.Unmarshal(b, &r) != nil {
			return
		}
		p, err := gcPolicyFromProto("gc_rule", &r)
		if err != nil {
			wantCode(t, "rejected rule", err, codes.InvalidArgument)
			return
		}
		again, err := gcPolicyFromProto("gc_rule", gcPolicyToProto(p))
		if err != nil {
			t.Fatalf("%v: converted back to a rule that is refused: %v", &r, err)
		}
		if fmt.Sprint(again) != fmt.Sprint(p) {
			t.Fatalf("%v: policy %+v came back as %+v", &r, p, again)
		}
	})
}
