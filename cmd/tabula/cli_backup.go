package main

// Backup verbs in cbt's style (createbackup, listbackups, getbackup,
// restore, deletebackup, updatebackup) and undelete. They call
// google.bigtable.admin.v2 directly, so that listbackups can pass a filter
// and an order, restore can show the operation's progress, and undelete
// exists at all (the official Go client has no UndeleteTable).

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"cloud.google.com/go/bigtable/admin/apiv2/adminpb"
	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/fieldmaskpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// defaultBackupCluster is the cluster of backup names when --cluster is not
// given: Tabula has one, which it calls "tabula" (any ID is accepted).
const defaultBackupCluster = "tabula"

// clusterName is projects/P/instances/I/clusters/C.
func (c connFlags) clusterName(cluster string) string {
	return fmt.Sprintf("projects/%s/instances/%s/clusters/%s", c.project, c.instance, cluster)
}

// backupName is projects/P/instances/I/clusters/C/backups/B.
func (c connFlags) backupName(cluster, backup string) string {
	return c.clusterName(cluster) + "/backups/" + backup
}

// parseTTL reads a --ttl (time.ParseDuration with a "d" unit) that must be
// positive.
func parseTTL(cmd *cobra.Command, s string) (time.Duration, error) {
	d, err := parseDuration(s)
	if err != nil || d <= 0 {
		return 0, usagef(cmd, "--ttl %q: want a positive duration such as 24h, 7d or 1d12h", s)
	}
	return d, nil
}

func newBackupCommands() []*cobra.Command {
	// Each verb has its own flag variables: registering a flag sets its
	// variable to the default, so verbs sharing one would see the last
	// verb's default.
	var createCluster, listCluster, getCluster, restoreCluster, deleteCluster, updateCluster string
	var createTTL, updateTTL, filter, orderBy string
	clusterFlag := func(v *string) func(fs *pflag.FlagSet) {
		return func(fs *pflag.FlagSet) {
			fs.StringVar(v, "cluster", defaultBackupCluster, "cluster of the backup names (Tabula has one; any ID is accepted)")
		}
	}
	ttlFlag := func(cluster, ttl *string, def string) func(fs *pflag.FlagSet) {
		return func(fs *pflag.FlagSet) {
			clusterFlag(cluster)(fs)
			fs.StringVar(ttl, "ttl", def, "the backup expires this long from now (6h to 90d; units d, h, m)")
		}
	}
	verbs := []clientVerb{
		{
			use:   "createbackup TABLE BACKUP [--ttl 24h] [--cluster C]",
			short: "Back a table up: its files referenced as of now, kept until --ttl from now",
			long: `createbackup backs TABLE up as BACKUP: every tablet's memtable is flushed and
the backup references the table's SSTables as of that point (nothing is
copied). It expires --ttl from now (Cloud Bigtable allows 6 hours to 90
days).`,
			args:  argsBetween(2, 2),
			flags: ttlFlag(&createCluster, &createTTL, "24h"),
			run: func(ctx context.Context, c *conn, cmd *cobra.Command, args []string) error {
				d, err := parseTTL(cmd, createTTL)
				if err != nil {
					return err
				}
				op, err := adminpb.NewBigtableTableAdminClient(c.cc).CreateBackup(ctx, &adminpb.CreateBackupRequest{
					Parent: c.names.clusterName(createCluster), BackupId: args[1],
					Backup: &adminpb.Backup{SourceTable: c.names.tableName(args[0]), ExpireTime: timestamppb.New(time.Now().Add(d))},
				})
				if err != nil {
					return err
				}
				var b adminpb.Backup
				if _, err := waitOperation(ctx, c, op, cmd.ErrOrStderr(), "createbackup", &b); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "backup %s of %s: %d bytes, expires %s\n", args[1], args[0], b.GetSizeBytes(), b.GetExpireTime().AsTime().UTC().Format(time.RFC3339))
				return nil
			},
		},
		{
			use:   "listbackups [--cluster C] [--filter EXPR] [--order-by FIELD [desc]]",
			short: "List the instance's backups",
			long: `listbackups lists the backups of --cluster ("-", the default, for every
cluster). --filter and --order-by are Cloud Bigtable's (ListBackups):
--filter 'source_table:events AND size_bytes > 1000', --order-by 'start_time desc'.`,
			args: argsBetween(0, 0),
			flags: func(fs *pflag.FlagSet) {
				fs.StringVar(&listCluster, "cluster", "-", "cluster whose backups to list (\"-\": all)")
				fs.StringVar(&filter, "filter", "", "Cloud Bigtable's backup filter expression")
				fs.StringVar(&orderBy, "order-by", "", "a backup field to order by, with \" desc\" for descending")
			},
			run: func(ctx context.Context, c *conn, cmd *cobra.Command, _ []string) error {
				var all []*adminpb.Backup
				req := &adminpb.ListBackupsRequest{Parent: c.names.clusterName(listCluster), Filter: filter, OrderBy: orderBy}
				for {
					resp, err := adminpb.NewBigtableTableAdminClient(c.cc).ListBackups(ctx, req)
					if err != nil {
						return err
					}
					all = append(all, resp.GetBackups()...)
					if resp.GetNextPageToken() == "" {
						break
					}
					req.PageToken = resp.GetNextPageToken()
				}
				return printBackups(cmd.OutOrStdout(), all)
			},
		},
		{
			use:   "getbackup BACKUP [--cluster C]",
			short: "Show a backup",
			args:  argsBetween(1, 1),
			flags: clusterFlag(&getCluster),
			run: func(ctx context.Context, c *conn, cmd *cobra.Command, args []string) error {
				b, err := adminpb.NewBigtableTableAdminClient(c.cc).GetBackup(ctx, &adminpb.GetBackupRequest{Name: c.names.backupName(getCluster, args[0])})
				if err != nil {
					return err
				}
				w := cmd.OutOrStdout()
				fmt.Fprintf(w, "Name:          %s\n", b.GetName())
				fmt.Fprintf(w, "Source table:  %s\n", lastSegment(b.GetSourceTable()))
				if b.GetSourceBackup() != "" {
					fmt.Fprintf(w, "Copied from:   %s\n", b.GetSourceBackup())
				}
				fmt.Fprintf(w, "State:         %s\n", b.GetState())
				fmt.Fprintf(w, "Type:          %s\n", b.GetBackupType())
				fmt.Fprintf(w, "Size:          %d bytes\n", b.GetSizeBytes())
				fmt.Fprintf(w, "Start time:    %s\n", formatProtoTime(b.GetStartTime()))
				fmt.Fprintf(w, "End time:      %s\n", formatProtoTime(b.GetEndTime()))
				fmt.Fprintf(w, "Expire time:   %s\n", formatProtoTime(b.GetExpireTime()))
				return nil
			},
		},
		{
			use:   "restore BACKUP NEWTABLE [--cluster C]",
			short: "Create a table from a backup, showing the operation's progress",
			long: `restore creates NEWTABLE from BACKUP (a long-running operation; its progress
is printed on stderr). Tabula's restore references the backup's files
rather than copying them.`,
			args:    argsBetween(2, 2),
			flags:   clusterFlag(&restoreCluster),
			streams: true,
			run: func(ctx context.Context, c *conn, cmd *cobra.Command, args []string) error {
				op, err := adminpb.NewBigtableTableAdminClient(c.cc).RestoreTable(ctx, &adminpb.RestoreTableRequest{
					Parent: fmt.Sprintf("projects/%s/instances/%s", c.names.project, c.names.instance), TableId: args[1],
					Source: &adminpb.RestoreTableRequest_Backup{Backup: c.names.backupName(restoreCluster, args[0])},
				})
				if err != nil {
					return err
				}
				var tbl adminpb.Table
				took, err := waitOperation(ctx, c, op, cmd.ErrOrStderr(), "restore", &tbl)
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "restored %s from backup %s in %s\n", args[1], args[0], took.Round(time.Millisecond))
				return nil
			},
		},
		{
			use:   "deletebackup BACKUP [--cluster C]",
			short: "Delete a backup (its files go once nothing else references them)",
			args:  argsBetween(1, 1),
			flags: clusterFlag(&deleteCluster),
			run: func(ctx context.Context, c *conn, _ *cobra.Command, args []string) error {
				_, err := adminpb.NewBigtableTableAdminClient(c.cc).DeleteBackup(ctx, &adminpb.DeleteBackupRequest{Name: c.names.backupName(deleteCluster, args[0])})
				return err
			},
		},
		{
			use:   "updatebackup BACKUP --ttl DURATION [--cluster C]",
			short: "Set a backup to expire --ttl from now",
			args:  argsBetween(1, 1),
			flags: ttlFlag(&updateCluster, &updateTTL, ""),
			run: func(ctx context.Context, c *conn, cmd *cobra.Command, args []string) error {
				if updateTTL == "" {
					return usagef(cmd, "--ttl is required")
				}
				d, err := parseTTL(cmd, updateTTL)
				if err != nil {
					return err
				}
				b, err := adminpb.NewBigtableTableAdminClient(c.cc).UpdateBackup(ctx, &adminpb.UpdateBackupRequest{
					Backup:     &adminpb.Backup{Name: c.names.backupName(updateCluster, args[0]), ExpireTime: timestamppb.New(time.Now().Add(d))},
					UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"expire_time"}},
				})
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "backup %s expires %s\n", args[0], formatProtoTime(b.GetExpireTime()))
				return nil
			},
		},
		{
			use:   "undelete TABLE",
			short: "Bring back a table deleted within the server's undelete retention",
			long: `undelete restores TABLE as it was when it was deleted — schema, authorized
views, grants and every cell — if the server still keeps it (tabula dev and
the cluster's master keep deleted tables for --undelete-retention, 7 days by
default).`,
			args: argsBetween(1, 1),
			run: func(ctx context.Context, c *conn, cmd *cobra.Command, args []string) error {
				op, err := adminpb.NewBigtableTableAdminClient(c.cc).UndeleteTable(ctx, &adminpb.UndeleteTableRequest{Name: c.names.tableName(args[0])})
				if err != nil {
					return err
				}
				var tbl adminpb.Table
				if _, err := waitOperation(ctx, c, op, cmd.ErrOrStderr(), "undelete", &tbl); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "undeleted %s\n", args[0])
				return nil
			},
		},
	}
	var cmds []*cobra.Command
	for _, v := range verbs {
		cmds = append(cmds, v.command())
	}
	return cmds
}

// progressMetadata is the metadata of the operations that report progress
// (RestoreTableMetadata, CopyBackupMetadata).
type progressMetadata interface {
	GetProgress() *adminpb.OperationProgress
}

// waitOperation polls op until it is done, printing its progress on
// progress as it changes, and unpacks its response into resp; the
// operation's error is returned as a status error. It returns how long it
// waited.
func waitOperation(ctx context.Context, c *conn, op *longrunningpb.Operation, progress io.Writer, what string, resp proto.Message) (time.Duration, error) {
	start := time.Now()
	ops := longrunningpb.NewOperationsClient(c.cc)
	last := int32(-1)
	report := func(op *longrunningpb.Operation) {
		if op.GetMetadata() == nil {
			return
		}
		md, err := op.GetMetadata().UnmarshalNew()
		if err != nil {
			return
		}
		if pm, ok := md.(progressMetadata); ok {
			if p := pm.GetProgress().GetProgressPercent(); p != last {
				fmt.Fprintf(progress, "%s: %d%%\n", what, p)
				last = p
			}
		}
	}
	delay := 50 * time.Millisecond
	for !op.GetDone() {
		report(op)
		select {
		case <-ctx.Done():
			return time.Since(start), ctx.Err()
		case <-time.After(delay):
		}
		delay = min(2*delay, time.Second)
		next, err := ops.GetOperation(ctx, &longrunningpb.GetOperationRequest{Name: op.GetName()})
		if err != nil {
			return time.Since(start), fmt.Errorf("polling operation %s: %w", op.GetName(), err)
		}
		op = next
	}
	report(op)
	if e := op.GetError(); e != nil {
		return time.Since(start), status.Error(codes.Code(e.GetCode()), e.GetMessage())
	}
	if r := op.GetResponse(); r != nil {
		if err := r.UnmarshalTo(resp); err != nil {
			return time.Since(start), fmt.Errorf("the operation's response: %w", err)
		}
	}
	return time.Since(start), nil
}

func printBackups(w io.Writer, backups []*adminpb.Backup) error {
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "BACKUP\tCLUSTER\tSOURCE TABLE\tBYTES\tSTATE\tSTART\tEXPIRES")
	for _, b := range backups {
		parts := strings.Split(b.GetName(), "/")
		cl := ""
		if len(parts) >= 6 {
			cl = parts[5]
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", lastSegment(b.GetName()), cl, lastSegment(b.GetSourceTable()), b.GetSizeBytes(),
			b.GetState(), formatProtoTime(b.GetStartTime()), formatProtoTime(b.GetExpireTime()))
	}
	return tw.Flush()
}

func lastSegment(name string) string { return name[strings.LastIndex(name, "/")+1:] }

func formatProtoTime(ts *timestamppb.Timestamp) string {
	if ts == nil {
		return "-"
	}
	return ts.AsTime().UTC().Format(time.RFC3339)
}
