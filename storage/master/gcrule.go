package master

import (
	"fmt"
	"time"

	"cloud.google.com/go/bigtable/admin/apiv2/adminpb"
	"github.com/tabuladb/tabula/storage/tabletdesc"
	"google.golang.org/protobuf/types/known/durationpb"
)

// maxGCRuleDepth bounds the nesting of union and intersection rules, so that
// a hostile request cannot make the server recurse without limit.
const maxGCRuleDepth = 16

// gcPolicyFromProto converts a Cloud Bigtable GcRule to the engine's policy.
// A nil rule or one with no rule set collects nothing. field names the rule
// in errors ("modifications[0].update.gc_rule").
func gcPolicyFromProto(field string, r *adminpb.GcRule) (tabletdesc.GCPolicy, error) {
	return gcPolicyFromProtoDepth(field, r, 0)
}

func gcPolicyFromProtoDepth(field string, r *adminpb.GcRule, depth int) (tabletdesc.GCPolicy, error) {
	if depth > maxGCRuleDepth {
		return tabletdesc.GCPolicy{}, invalidArg(field, "GC rules nest more than %d levels deep", maxGCRuleDepth)
	}
	if r == nil {
		return tabletdesc.GCPolicy{}, nil
	}
	switch rule := r.Rule.(type) {
	case nil:
		return tabletdesc.GCPolicy{}, nil
	case *adminpb.GcRule_MaxNumVersions:
		if rule.MaxNumVersions < 1 {
			return tabletdesc.GCPolicy{}, invalidArg(field+".max_num_versions", "must be at least 1, got %d", rule.MaxNumVersions)
		}
		return tabletdesc.GCPolicy{MaxVersions: int(rule.MaxNumVersions)}, nil
	case *adminpb.GcRule_MaxAge:
		if err := rule.MaxAge.CheckValid(); err != nil {
			return tabletdesc.GCPolicy{}, invalidArg(field+".max_age", "%v", err)
		}
		d := rule.MaxAge.AsDuration()
		// Cells are stamped in microseconds (and usually milliseconds), so
		// an age below a millisecond is a mistake, as Cloud Bigtable says.
		if d < time.Millisecond {
			return tabletdesc.GCPolicy{}, invalidArg(field+".max_age", "must be at least 1ms, got %v", d)
		}
		return tabletdesc.GCPolicy{MaxAge: d}, nil
	case *adminpb.GcRule_Union_:
		var out tabletdesc.GCPolicy
		for i, sub := range rule.Union.GetRules() {
			p, err := gcPolicyFromProtoDepth(fmt.Sprintf("%s.union.rules[%d]", field, i), sub, depth+1)
			if err != nil {
				return tabletdesc.GCPolicy{}, err
			}
			out.Union = append(out.Union, p)
		}
		return out, nil
	case *adminpb.GcRule_Intersection_:
		rules := rule.Intersection.GetRules()
		if len(rules) == 0 {
			// The engine's intersection needs at least one rule; an empty
			// one would collect everything or nothing depending on taste.
			return tabletdesc.GCPolicy{}, invalidArg(field+".intersection.rules", "an intersection needs at least one rule")
		}
		var out tabletdesc.GCPolicy
		for i, sub := range rules {
			p, err := gcPolicyFromProtoDepth(fmt.Sprintf("%s.intersection.rules[%d]", field, i), sub, depth+1)
			if err != nil {
				return tabletdesc.GCPolicy{}, err
			}
			out.Intersection = append(out.Intersection, p)
		}
		return out, nil
	default:
		return tabletdesc.GCPolicy{}, invalidArg(field, "unknown GC rule %T", rule)
	}
}

// gcPolicyToProto converts a policy made by gcPolicyFromProto back to the
// rule it came from. A policy with several rules set (which
// gcPolicyFromProto never makes, but the engine allows) becomes the union of
// its parts, which is what the engine applies.
func gcPolicyToProto(p tabletdesc.GCPolicy) *adminpb.GcRule {
	var parts []*adminpb.GcRule
	if p.MaxVersions > 0 {
		parts = append(parts, &adminpb.GcRule{Rule: &adminpb.GcRule_MaxNumVersions{MaxNumVersions: int32(p.MaxVersions)}})
	}
	if p.MaxAge > 0 {
		parts = append(parts, &adminpb.GcRule{Rule: &adminpb.GcRule_MaxAge{MaxAge: durationpb.New(p.MaxAge)}})
	}
	if p.Union != nil {
		u := &adminpb.GcRule_Union{Rules: []*adminpb.GcRule{}}
		for _, sub := range p.Union {
			u.Rules = append(u.Rules, gcPolicyToProto(sub))
		}
		parts = append(parts, &adminpb.GcRule{Rule: &adminpb.GcRule_Union_{Union: u}})
	}
	if len(p.Intersection) > 0 {
		x := &adminpb.GcRule_Intersection{}
		for _, sub := range p.Intersection {
			x.Rules = append(x.Rules, gcPolicyToProto(sub))
		}
		parts = append(parts, &adminpb.GcRule{Rule: &adminpb.GcRule_Intersection_{Intersection: x}})
	}
	switch len(parts) {
	case 0:
		return &adminpb.GcRule{}
	case 1:
		return parts[0]
	}
	return &adminpb.GcRule{Rule: &adminpb.GcRule_Union_{Union: &adminpb.GcRule_Union{Rules: parts}}}
}
