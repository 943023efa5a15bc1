package master

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tabuladb/tabula/storage/master/adminextpb"
	"github.com/tabuladb/tabula/storage/meta"
	"github.com/tabuladb/tabula/storage/sstable"
	"github.com/tabuladb/tabula/storage/tabletdesc"
)

// minBlockSize bounds SetLocalityGroupRequest.block_size from below: smaller
// blocks make an index as large as the data.
const minBlockSize = 1 << 10

// LocalityGroupService implements Tabula's admin extension
// tabula.admin.v1.LocalityGroups over an AdminService (its catalog, locks
// and tablets). Register it with AdminService.Register.
//
// A family's locality group is fixed once the family exists outside it:
// the tablets keep a family's cells in its group's SSTables and do not
// rewrite them into another group's (tablet.SetSchema refuses the move), so
// SetLocalityGroup answers FAILED_PRECONDITION for such a family. To put a
// family in a group, name it in SetLocalityGroup before creating it: missing
// families are created in the group.
type LocalityGroupService struct {
	adminextpb.UnimplementedLocalityGroupsServer
	admin *AdminService
}

// SetLocalityGroup creates or reconfigures a locality group and puts
// families in it (creating those that do not exist). in_memory is set as
// given; compression and block_size keep their current values when left
// unspecified (0).
func (l *LocalityGroupService) SetLocalityGroup(ctx context.Context, req *adminextpb.SetLocalityGroupRequest) (*adminextpb.LocalityGroupsResponse, error) {
	s := l.admin
	n, err := s.parseTable("table", req.GetTable())
	if err != nil {
		return nil, err
	}
	group := req.GetGroup()
	if err := validateFamilyName("group", group); err != nil {
		return nil, err
	}
	for i, f := range req.GetFamilies() {
		if err := validateFamilyName(fmt.Sprintf("families[%d]", i), f); err != nil {
			return nil, err
		}
	}
	var compression *tabletdesc.Compression
	switch req.GetCompression() {
	case adminextpb.Compression_COMPRESSION_UNSPECIFIED:
	case adminextpb.Compression_COMPRESSION_NONE:
		compression = new(tabletdesc.NoCompression)
	case adminextpb.Compression_COMPRESSION_SNAPPY:
		compression = new(tabletdesc.SnappyCompression)
	case adminextpb.Compression_COMPRESSION_ZSTD:
		compression = new(tabletdesc.ZstdCompression)
	default:
		return nil, invalidArg("compression", "unknown compression %v (none, snappy or zstd)", req.GetCompression())
	}
	if bs := req.GetBlockSize(); bs != 0 && (bs < minBlockSize || bs > sstable.MaxBlockSize) {
		return nil, invalidArg("block_size", "%d bytes is outside [%d, %d]", bs, minBlockSize, sstable.MaxBlockSize)
	}

	t, err := s.update(ctx, n, true, func(t *meta.Table) error {
		if t.Families == nil {
			t.Families = make(map[string]tabletdesc.Family)
		}
		if t.LocalityGroups == nil {
			t.LocalityGroups = make(map[string]tabletdesc.LocalityGroup)
		}
		for i, name := range req.GetFamilies() {
			f, ok := t.Families[name]
			if !ok {
				if len(t.Families) >= s.opts.MaxFamilies {
					return invalidArg(fmt.Sprintf("families[%d]", i), "table %q has %d families, the limit is %d", n.String(), len(t.Families), s.opts.MaxFamilies)
				}
				t.Families[name] = tabletdesc.Family{Name: name, LocalityGroup: storedGroup(group)}
				continue
			}
			if cur := groupOf(f); cur != group {
				return status.Errorf(codes.FailedPrecondition,
					"families[%d]: column family %q of table %q is in locality group %q; Tabula does not move a family's data between groups: name families in SetLocalityGroup before creating them (drop and re-create the family to start it empty in %q)",
					i, name, n.String(), cur, group)
			}
		}
		g := t.LocalityGroups[group]
		g.Name = group
		if req.InMemory != nil {
			g.InMemory = req.GetInMemory()
		}
		if compression != nil {
			g.Compression = *compression
		}
		if bs := req.GetBlockSize(); bs != 0 {
			g.BlockSize = int(bs)
		}
		t.LocalityGroups[group] = g
		return nil
	})
	if err != nil {
		return nil, err
	}
	return localityGroups(t), nil
}

// GetLocalityGroups lists a table's locality groups, "default" included.
func (l *LocalityGroupService) GetLocalityGroups(ctx context.Context, req *adminextpb.GetLocalityGroupsRequest) (*adminextpb.LocalityGroupsResponse, error) {
	n, err := l.admin.parseTable("table", req.GetTable())
	if err != nil {
		return nil, err
	}
	t, err := l.admin.get(ctx, n)
	if err != nil {
		return nil, err
	}
	return localityGroups(t), nil
}

// groupOf returns the name of a family's group.
func groupOf(f tabletdesc.Family) string {
	if f.LocalityGroup == "" {
		return tabletdesc.DefaultLocalityGroup
	}
	return f.LocalityGroup
}

// storedGroup is how a family records its group: "" for the default, so
// that families created by the Cloud API and by the extension look alike.
func storedGroup(group string) string {
	if group == tabletdesc.DefaultLocalityGroup {
		return ""
	}
	return group
}

func localityGroups(t meta.Table) *adminextpb.LocalityGroupsResponse {
	members := map[string][]string{tabletdesc.DefaultLocalityGroup: nil}
	for name := range t.LocalityGroups {
		members[name] = nil
	}
	for name, f := range t.Families {
		members[groupOf(f)] = append(members[groupOf(f)], name)
	}
	resp := &adminextpb.LocalityGroupsResponse{}
	for _, name := range slices.Sorted(maps.Keys(members)) {
		g := t.LocalityGroups[name]
		bs := g.BlockSize
		if bs <= 0 {
			bs = sstable.DefaultBlockSize
		}
		slices.Sort(members[name])
		resp.Groups = append(resp.Groups, &adminextpb.LocalityGroup{
			Name:        name,
			Families:    members[name],
			InMemory:    g.InMemory,
			Compression: compressionProto(g.Compression),
			BlockSize:   int64(bs),
		})
	}
	return resp
}

func compressionProto(c tabletdesc.Compression) adminextpb.Compression {
	switch c {
	case tabletdesc.SnappyCompression:
		return adminextpb.Compression_COMPRESSION_SNAPPY
	case tabletdesc.ZstdCompression:
		return adminextpb.Compression_COMPRESSION_ZSTD
	}
	return adminextpb.Compression_COMPRESSION_NONE
}
