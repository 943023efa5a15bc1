package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"cloud.google.com/go/bigtable/admin/apiv2/adminpb"
	"cloud.google.com/go/iam/apiv1/iampb"
	"github.com/spf13/cobra"
	"google.golang.org/genproto/googleapis/type/expr"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tabuladb/tabula/security/acl"
)

// The grant verbs read and write a table's grants through Cloud Bigtable's
// IAM RPCs (GetIamPolicy, SetIamPolicy), as any IAM tool could: a grant is
// a read-modify-write with the policy's etag, retried when another change
// came between.

// newACLCommands returns grant, revoke and acl.
func newACLCommands() []*cobra.Command {
	verbs := []clientVerb{
		{
			use:   "acl TABLE",
			short: "Show a table's grants: member, family (* = the whole table), permissions",
			args:  argsBetween(1, 1),
			run: func(ctx context.Context, c *conn, cmd *cobra.Command, args []string) error {
				p, _, err := getPolicy(ctx, c, args[0])
				if err != nil {
					return err
				}
				return printPolicy(cmd.OutOrStdout(), p)
			},
		},
		{
			use:   "grant TABLE MEMBER PERMISSIONS [family=FAMILY]",
			short: "Grant read, write or admin on a table (or one family) to user:NAME or group:NAME",
			long: `grant adds permissions to a member's grant on a table: PERMISSIONS is read,
write, admin, all or a comma list (read,write); admin implies read and write
and is table-wide. family=FAMILY limits a read or write grant to one column
family: the member then sees only the families it may read, and a write
touching another family is refused whole.

  tabula grant users user:alice read
  tabula grant users group:analysts read family=profile
  tabula grant users user:etl read,write`,
			args: argsBetween(3, 4),
			run: func(ctx context.Context, c *conn, cmd *cobra.Command, args []string) error {
				member, perms, family, err := grantArgs(cmd, args)
				if err != nil {
					return err
				}
				p, err := changePolicy(ctx, c, args[0], func(p acl.Policy) (acl.Policy, error) { return p.With(member, family, perms) })
				if err != nil {
					return err
				}
				return printPolicy(cmd.OutOrStdout(), p)
			},
		},
		{
			use:   "revoke TABLE MEMBER [PERMISSIONS] [family=FAMILY]",
			short: "Take permissions (default all) from a member: on one family with family=, else on the table and every family",
			args:  argsBetween(2, 4),
			run: func(ctx context.Context, c *conn, cmd *cobra.Command, args []string) error {
				if len(args) == 2 || strings.HasPrefix(args[2], "family=") {
					args = append(args[:2], append([]string{"all"}, args[2:]...)...)
				}
				member, perms, family, err := grantArgs(cmd, args)
				if err != nil {
					return err
				}
				everywhere := len(args) < 4
				p, err := changePolicy(ctx, c, args[0], func(p acl.Policy) (acl.Policy, error) {
					if !everywhere {
						return p.Without(member, family, perms), nil
					}
					for _, g := range p.Grants {
						if g.Member == member {
							p = p.Without(member, g.Family, perms)
						}
					}
					return p, nil
				})
				if err != nil {
					return err
				}
				return printPolicy(cmd.OutOrStdout(), p)
			},
		},
	}
	var cmds []*cobra.Command
	for _, v := range verbs {
		cmds = append(cmds, v.command())
	}
	return cmds
}

// grantArgs parses TABLE MEMBER PERMISSIONS [family=F].
func grantArgs(cmd *cobra.Command, args []string) (member string, perms acl.Permission, family string, err error) {
	member = args[1]
	if err := acl.ValidateMember(member); err != nil {
		return "", 0, "", usagef(cmd, "%v", err)
	}
	if perms, err = acl.ParsePermission(args[2]); err != nil {
		return "", 0, "", usagef(cmd, "%v", err)
	}
	if len(args) == 4 {
		f, ok := strings.CutPrefix(args[3], "family=")
		if !ok || f == "" {
			return "", 0, "", usagef(cmd, "%q: want family=FAMILY", args[3])
		}
		if err := acl.ValidateFamily(f); err != nil {
			return "", 0, "", usagef(cmd, "%v", err)
		}
		family = f
	}
	return member, perms, family, nil
}

func (c *conn) tableName(table string) string {
	return "projects/" + c.names.project + "/instances/" + c.names.instance + "/tables/" + table
}

// getPolicy reads a table's grants and the policy's etag.
func getPolicy(ctx context.Context, c *conn, table string) (acl.Policy, []byte, error) {
	pol, err := adminpb.NewBigtableTableAdminClient(c.cc).GetIamPolicy(ctx, &iampb.GetIamPolicyRequest{Resource: c.tableName(table)})
	if err != nil {
		return acl.Policy{}, nil, err
	}
	var bindings []acl.Binding
	for _, b := range pol.GetBindings() {
		ab := acl.Binding{Role: b.GetRole(), Members: b.GetMembers()}
		if cond := b.GetCondition(); cond != nil {
			if ab.Family, err = acl.ParseFamilyCondition(cond.GetExpression()); err != nil {
				return acl.Policy{}, nil, err
			}
		}
		bindings = append(bindings, ab)
	}
	p, err := acl.FromBindings(bindings)
	return p, pol.GetEtag(), err
}

// changePolicy applies change to a table's grants with the etag of the read,
// again (up to 5 times) when another change came between.
func changePolicy(ctx context.Context, c *conn, table string, change func(acl.Policy) (acl.Policy, error)) (acl.Policy, error) {
	var err error
	for range 5 {
		var p acl.Policy
		var etag []byte
		if p, etag, err = getPolicy(ctx, c, table); err != nil {
			return acl.Policy{}, err
		}
		if p, err = change(p); err != nil {
			return acl.Policy{}, err
		}
		pol := &iampb.Policy{Version: 3, Etag: etag}
		for _, b := range p.Bindings() {
			pb := &iampb.Binding{Role: b.Role, Members: b.Members}
			if b.Family != "" {
				pb.Condition = &expr.Expr{Title: "family " + b.Family, Expression: acl.FamilyCondition(b.Family)}
			}
			pol.Bindings = append(pol.Bindings, pb)
		}
		_, err = adminpb.NewBigtableTableAdminClient(c.cc).SetIamPolicy(ctx, &iampb.SetIamPolicyRequest{Resource: c.tableName(table), Policy: pol})
		if status.Code(err) != codes.Aborted {
			return p, err
		}
	}
	return acl.Policy{}, fmt.Errorf("the grants of %s kept changing under this change: %w", table, err)
}

func printPolicy(w io.Writer, p acl.Policy) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MEMBER\tFAMILY\tPERMISSIONS")
	for _, g := range p.Grants {
		f := g.Family
		if f == "" {
			f = "*"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", g.Member, f, g.Perms)
	}
	return tw.Flush()
}
