package main

// Forced tablet operations through Tabula's admin extension (tabula.admin.v1
// TabletOperations): list a table's tablets, split, merge or compact the
// tablet holding a row. A cluster's active master carries them out (any
// tablet server forwards), and `tabula dev`, which runs the same roles in
// one process; other servers (the emulator, Cloud Bigtable) answer
// UNIMPLEMENTED.

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/tabuladb/tabula/storage/master/adminextpb"
)

func printTablets(w io.Writer, tabs []*adminextpb.TabletInfo) error {
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "TABLET\tSTART\tEND\tSERVER\tBYTES")
	for _, t := range tabs {
		server := t.GetServer()
		if server == "" {
			server = "-"
		}
		size := fmt.Sprint(t.GetBytes())
		if t.GetSharesFiles() {
			size = "≥" + size // files shared with a split sibling
		}
		fmt.Fprintf(tw, "%s\t%q\t%q\t%s\t%s\n", t.GetTabletId(), t.GetStartKey(), t.GetEndKey(), server, size)
	}
	return tw.Flush()
}

func newTabletCommands() []*cobra.Command {
	var splitKey string
	var minor bool
	verbs := []clientVerb{
		{
			use:   "tablets TABLE",
			short: "List a table's tablets and their servers",
			args:  argsBetween(1, 1),
			run: func(ctx context.Context, c *conn, cmd *cobra.Command, args []string) error {
				resp, err := adminextpb.NewTabletOperationsClient(c.cc).ListTablets(ctx, &adminextpb.ListTabletsRequest{Table: c.names.tableName(args[0])})
				if err != nil {
					return err
				}
				return printTablets(cmd.OutOrStdout(), resp.GetTablets())
			},
		},
		{
			use:   "splittablet TABLE ROW [--at KEY]",
			short: "Split the tablet holding ROW, at KEY or at a middle key",
			long: `splittablet splits the tablet holding ROW on its server, at --at KEY (which
must lie strictly inside the tablet) or at a middle key by size, and prints
the children once the split is committed to METADATA and the master sees
them served (the next tablets or compacttablet finds them).`,
			args: argsBetween(2, 2),
			flags: func(fs *pflag.FlagSet) {
				fs.StringVar(&splitKey, "at", "", "the right child's first row (default: a middle key by size)")
			},
			run: func(ctx context.Context, c *conn, cmd *cobra.Command, args []string) error {
				resp, err := adminextpb.NewTabletOperationsClient(c.cc).SplitTablet(ctx, &adminextpb.SplitTabletRequest{
					Table: c.names.tableName(args[0]), RowKey: []byte(args[1]), SplitKey: []byte(splitKey)})
				if err != nil {
					return err
				}
				return printTablets(cmd.OutOrStdout(), resp.GetChildren())
			},
		},
		{
			use:   "mergetablets TABLE ROW",
			short: "Merge the tablet holding ROW with its right neighbour",
			long: `mergetablets has the active master merge the tablet holding ROW with the
next tablet of the table: both are compacted and unloaded, one tablet over
their union is committed to METADATA and assigned. It prints the merged
tablet once committed; it serves a moment later.`,
			args: argsBetween(2, 2),
			run: func(ctx context.Context, c *conn, cmd *cobra.Command, args []string) error {
				resp, err := adminextpb.NewTabletOperationsClient(c.cc).MergeTablets(ctx, &adminextpb.MergeTabletsRequest{
					Table: c.names.tableName(args[0]), RowKey: []byte(args[1])})
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "merged %s and %s\n", resp.GetLeftId(), resp.GetRightId())
				return printTablets(cmd.OutOrStdout(), []*adminextpb.TabletInfo{resp.GetMerged()})
			},
		},
		{
			use:   "compacttablet TABLE ROW [--minor]",
			short: "Run a major (or merging) compaction of the tablet holding ROW",
			args:  argsBetween(2, 2),
			flags: func(fs *pflag.FlagSet) {
				fs.BoolVar(&minor, "minor", false, "a merging compaction instead of a major one")
			},
			run: func(ctx context.Context, c *conn, cmd *cobra.Command, args []string) error {
				resp, err := adminextpb.NewTabletOperationsClient(c.cc).CompactTablet(ctx, &adminextpb.CompactTabletRequest{
					Table: c.names.tableName(args[0]), RowKey: []byte(args[1]), Major: !minor})
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "compacted %s\n", resp.GetTabletId())
				return nil
			},
		},
	}
	cmds := make([]*cobra.Command, 0, len(verbs))
	for _, v := range verbs {
		cmds = append(cmds, v.command())
	}
	return cmds
}
