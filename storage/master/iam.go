package master

import (
	"bytes"
	"context"
	"encoding/binary"
	"slices"

	"cloud.google.com/go/iam/apiv1/iampb"
	"google.golang.org/genproto/googleapis/type/expr"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tabuladb/tabula/security/acl"
	"github.com/tabuladb/tabula/storage/meta"
)

// Cloud Bigtable's IAM RPCs on tables map onto the table's grants
// (meta.Table.ACL, security/acl): roles/bigtable.reader is read,
// roles/bigtable.user read and write, roles/bigtable.admin admin, and
// Tabula's roles/tabula.writer write alone. A grant on one column family is
// a binding with the condition `resource.family == "NAME"` (policy version
// 3). Members are user:NAME or group:NAME. The etag is the table entry's
// generation: a SetIamPolicy carrying the etag of an older GetIamPolicy is
// ABORTED, so read-modify-write loops lose no concurrent change.
//
// Who may call them is the guard's business (security/guard: admin on the
// table); without authentication, everyone may.

// iamEtag is the etag of a table entry.
func iamEtag(t meta.Table) []byte { return binary.BigEndian.AppendUint64(nil, t.Generation) }

// policyProto renders a table's grants as an IAM policy.
func policyProto(t meta.Table) *iampb.Policy {
	p := &iampb.Policy{Version: 1, Etag: iamEtag(t)}
	for _, b := range t.ACL.Bindings() {
		pb := &iampb.Binding{Role: b.Role, Members: b.Members}
		if b.Family != "" {
			pb.Condition = &expr.Expr{Title: "family " + b.Family, Expression: acl.FamilyCondition(b.Family)}
			p.Version = 3
		}
		p.Bindings = append(p.Bindings, pb)
	}
	return p
}

// GetIamPolicy returns the table's grants as an IAM policy.
func (s *AdminService) GetIamPolicy(ctx context.Context, req *iampb.GetIamPolicyRequest) (*iampb.Policy, error) {
	n, err := s.parseTable("resource", req.GetResource())
	if err != nil {
		return nil, err
	}
	t, err := s.get(ctx, n)
	if err != nil {
		return nil, err
	}
	return policyProto(t), nil
}

// SetIamPolicy replaces the table's grants with the policy's bindings. An
// unknown role, a member that is not user: or group:, a condition other
// than a family's, or a family the table lacks is INVALID_ARGUMENT and
// changes nothing; a stale etag is ABORTED.
func (s *AdminService) SetIamPolicy(ctx context.Context, req *iampb.SetIamPolicyRequest) (*iampb.Policy, error) {
	n, err := s.parseTable("resource", req.GetResource())
	if err != nil {
		return nil, err
	}
	if req.GetPolicy() == nil {
		return nil, invalidArg("policy", "required")
	}
	var bindings []acl.Binding
	for i, b := range req.GetPolicy().GetBindings() {
		ab := acl.Binding{Role: b.GetRole(), Members: b.GetMembers()}
		if c := b.GetCondition(); c != nil {
			if ab.Family, err = acl.ParseFamilyCondition(c.GetExpression()); err != nil {
				return nil, invalidArg("policy.bindings", "[%d]: %v", i, err)
			}
		}
		bindings = append(bindings, ab)
	}
	policy, err := acl.FromBindings(bindings)
	if err != nil {
		return nil, invalidArg("policy", "%v", err)
	}
	etag := req.GetPolicy().GetEtag()
	t, err := s.update(ctx, n, false, func(t *meta.Table) error {
		if len(etag) > 0 && !bytes.Equal(etag, iamEtag(*t)) {
			return status.Errorf(codes.Aborted, "policy.etag: the table's policy changed since it was read; read it again")
		}
		for _, g := range policy.Grants {
			if _, ok := t.Families[g.Family]; g.Family != "" && !ok {
				return invalidArg("policy.bindings", "table %s has no column family %q", n, g.Family)
			}
		}
		t.ACL = policy
		return nil
	})
	if err != nil {
		return nil, err
	}
	s.opts.Logger.Info("grants changed", "audit", "grant", "table", n.id, "members", policy.Members(), "grants", len(policy.Grants))
	return policyProto(t), nil
}

// TestIamPermissions answers, without authentication, every permission it
// knows (security/acl.IAMPermission): everyone may do everything. With
// authentication on, the guard answers it from the caller's grants before
// the call gets here.
func (s *AdminService) TestIamPermissions(ctx context.Context, req *iampb.TestIamPermissionsRequest) (*iampb.TestIamPermissionsResponse, error) {
	n, err := s.parseTable("resource", req.GetResource())
	if err != nil {
		return nil, err
	}
	if _, err := s.get(ctx, n); err != nil {
		return nil, err
	}
	out := &iampb.TestIamPermissionsResponse{}
	for _, p := range req.GetPermissions() {
		if _, ok := acl.IAMPermission(p); ok && !slices.Contains(out.Permissions, p) {
			out.Permissions = append(out.Permissions, p)
		}
	}
	return out, nil
}
