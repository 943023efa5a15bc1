package main

// Locality groups through Tabula's admin extension (tabula.admin.v1
// LocalityGroups), which the Cloud Bigtable API has no field for. Servers
// without it (the emulator, Cloud Bigtable) answer UNIMPLEMENTED, and the
// tools that only prefer a locality group fall back to plain families.

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/tabuladb/tabula/storage/master/adminextpb"
)

// tableName is the full resource name the extension takes.
func (c connFlags) tableName(table string) string {
	return fmt.Sprintf("projects/%s/instances/%s/tables/%s", c.project, c.instance, table)
}

// parseCompression maps none, snappy and zstd to the extension's enum.
func parseCompression(s string) (adminextpb.Compression, error) {
	switch strings.ToLower(s) {
	case "none":
		return adminextpb.Compression_COMPRESSION_NONE, nil
	case "snappy":
		return adminextpb.Compression_COMPRESSION_SNAPPY, nil
	case "zstd":
		return adminextpb.Compression_COMPRESSION_ZSTD, nil
	}
	return 0, fmt.Errorf("compression=%q: want none, snappy or zstd", s)
}

// compressionName is the inverse of parseCompression, for listings.
func compressionName(c adminextpb.Compression) string {
	switch c {
	case adminextpb.Compression_COMPRESSION_NONE:
		return "none"
	case adminextpb.Compression_COMPRESSION_SNAPPY:
		return "snappy"
	case adminextpb.Compression_COMPRESSION_ZSTD:
		return "zstd"
	}
	return "-"
}

// parseLocalityGroupArgs builds a SetLocalityGroup request from
// `families=f1,f2 inmemory=true compression=zstd blocksize=65536`.
func parseLocalityGroupArgs(tableName, group string, args []string) (*adminextpb.SetLocalityGroupRequest, error) {
	if err := validFamily(group); err != nil {
		return nil, fmt.Errorf("bad group name %q: want [_a-zA-Z0-9][-_.a-zA-Z0-9]*", group)
	}
	kv, err := parseKeyValues(args, "families", "inmemory", "compression", "blocksize")
	if err != nil {
		return nil, err
	}
	req := &adminextpb.SetLocalityGroupRequest{Table: tableName, Group: group}
	if s, ok := kv["families"]; ok {
		req.Families = splitList(s)
		for _, f := range req.Families {
			if err := validFamily(f); err != nil {
				return nil, err
			}
		}
	}
	if s, ok := kv["inmemory"]; ok {
		b, err := strconv.ParseBool(s)
		if err != nil {
			return nil, fmt.Errorf("inmemory=%q: want true or false", s)
		}
		req.InMemory = &b
	}
	if s, ok := kv["compression"]; ok {
		if req.Compression, err = parseCompression(s); err != nil {
			return nil, err
		}
	}
	if s, ok := kv["blocksize"]; ok {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n <= 0 || n > 64<<20 {
			return nil, fmt.Errorf("blocksize=%q: want bytes in 1..%d", s, 64<<20)
		}
		req.BlockSize = n
	}
	return req, nil
}

func newSetLocalityGroupCommand() *cobra.Command {
	return clientVerb{
		use:   "setlocalitygroup TABLE GROUP [families=F1,F2] [inmemory=true|false] [compression=none|snappy|zstd] [blocksize=BYTES]",
		short: "Create or configure a locality group (Tabula extension) and put families in it",
		long: `setlocalitygroup configures one of the paper's locality groups: families in a
group share SSTables; a group can be kept in memory and has its own block
compression and block size. Families that do not exist yet are created in
the group; inmemory, compression and blocksize not given keep the group's
current settings. Needs a Tabula server: others answer UNIMPLEMENTED.`,
		args: argsBetween(2, 6),
		run: func(ctx context.Context, c *conn, cmd *cobra.Command, args []string) error {
			req, err := parseLocalityGroupArgs(c.names.tableName(args[0]), args[1], args[2:])
			if err != nil {
				return usagef(cmd, "%v", err)
			}
			resp, err := adminextpb.NewLocalityGroupsClient(c.cc).SetLocalityGroup(ctx, req)
			if err != nil {
				return err
			}
			return printLocalityGroups(cmd.OutOrStdout(), resp.GetGroups())
		},
	}.command()
}

// localityGroups returns a table's groups, or ok=false when the server
// does not have the extension.
func localityGroups(ctx context.Context, c *conn, table string) (groups []*adminextpb.LocalityGroup, ok bool, err error) {
	resp, err := adminextpb.NewLocalityGroupsClient(c.cc).GetLocalityGroups(ctx, &adminextpb.GetLocalityGroupsRequest{Table: c.names.tableName(table)})
	if status.Code(err) == codes.Unimplemented {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	return resp.GetGroups(), true, nil
}

// setInMemoryGroup puts families (created if missing) in an in-memory
// group. It returns false, without error, when the server lacks the
// extension, so callers can fall back to plain families.
func setInMemoryGroup(ctx context.Context, c *conn, table, group string, families []string) (bool, error) {
	_, err := adminextpb.NewLocalityGroupsClient(c.cc).SetLocalityGroup(ctx, &adminextpb.SetLocalityGroupRequest{
		Table:       c.names.tableName(table),
		Group:       group,
		Families:    families,
		InMemory:    proto.Bool(true),
		Compression: adminextpb.Compression_COMPRESSION_SNAPPY,
	})
	if status.Code(err) == codes.Unimplemented {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("locality group %s of %s: %w", group, table, describe(err))
	}
	return true, nil
}

func printLocalityGroups(w io.Writer, groups []*adminextpb.LocalityGroup) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "Locality Group\tFamilies\tIn Memory\tCompression\tBlock Size")
	fmt.Fprintln(tw, "--------------\t--------\t---------\t-----------\t----------")
	for _, g := range groups {
		fmt.Fprintf(tw, "%s\t%s\t%v\t%s\t%d\n", g.GetName(), strings.Join(g.GetFamilies(), ","), g.GetInMemory(), compressionName(g.GetCompression()), g.GetBlockSize())
	}
	return tw.Flush()
}
