package master

import (
	"slices"
	"testing"
	"time"

	"cloud.google.com/go/bigtable/admin/apiv2/adminpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

func testBackups() []*adminpb.Backup {
	at := func(h int) *timestamppb.Timestamp {
		return timestamppb.New(time.Date(2026, 1, 1, h, 0, 0, 0, time.UTC))
	}
	mk := func(id, table string, h int, size int64) *adminpb.Backup {
		return &adminpb.Backup{Name: "projects/p/instances/i/clusters/c/backups/" + id, SourceTable: "projects/p/instances/i/tables/" + table,
			StartTime: at(h), EndTime: at(h), ExpireTime: at(h + 10), SizeBytes: size, State: adminpb.Backup_READY}
	}
	return []*adminpb.Backup{mk("howl-1", "prod-events", 1, 100), mk("howl-2", "dev", 2, 5000), mk("nightly", "prod-events", 3, 20000)}
}

func ids(bs []*adminpb.Backup) []string {
	var out []string
	for _, b := range bs {
		out = append(out, b.GetName()[len("projects/p/instances/i/clusters/c/backups/"):])
	}
	return out
}

// TestBackupFilter: Cloud Bigtable's documented filter examples and their
// combinations select what the documentation says.
func TestBackupFilter(t *testing.T) {
	for _, tc := range []struct {
		filter string
		want   []string
	}{
		{``, []string{"howl-1", "howl-2", "nightly"}},
		{`name:howl`, []string{"howl-1", "howl-2"}},
		{`name:"nightly"`, []string{"nightly"}},
		{`name:"night"`, nil},
		{`name = howl-2`, []string{"howl-2"}},
		{`source_table:prod`, []string{"howl-1", "nightly"}},
		{`state:READY`, []string{"howl-1", "howl-2", "nightly"}},
		{`STATE:creating`, nil},
		{`size_bytes > 1000`, []string{"howl-2", "nightly"}},
		{`size_bytes <= 5000`, []string{"howl-1", "howl-2"}},
		{`(name:howl) AND (start_time < "2026-01-01T01:30:00Z")`, []string{"howl-1"}},
		{`name:howl start_time >= 2026-01-01T02:00:00Z`, []string{"howl-2"}},
		{`source_table:dev OR size_bytes > 10000`, []string{"howl-2", "nightly"}},
		{`name:howl AND source_table:dev OR size_bytes < 200`, []string{"howl-1", "howl-2"}},
		{`NOT name:howl`, []string{"nightly"}},
		{`-name:howl`, []string{"nightly"}},
		{`expire_time > 2026-01-01T11:30:00Z`, []string{"howl-2", "nightly"}},
		{`end_time != 2026-01-01T03:00:00Z`, []string{"howl-1", "howl-2"}},
	} {
		f, err := parseBackupFilter(tc.filter)
		if err != nil {
			t.Errorf("%s: %v", tc.filter, err)
			continue
		}
		got := ids(slices.DeleteFunc(testBackups(), func(b *adminpb.Backup) bool { return !f(b) }))
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.filter, got, tc.want)
		}
	}
	for _, bad := range []string{`owner:bob`, `size_bytes > big`, `start_time < yesterday`, `name`, `name ~ x`, `(name:a`, `state:SLEEPING`, `name:"open`, `size_bytes ! 3`} {
		if _, err := parseBackupFilter(bad); err == nil {
			t.Errorf("%s: accepted", bad)
		}
	}
}

// TestBackupOrder: fields with asc and desc, several keys, the default
// newest first.
func TestBackupOrder(t *testing.T) {
	for _, tc := range []struct {
		order string
		want  []string
	}{
		{``, []string{"nightly", "howl-2", "howl-1"}},
		{`start_time`, []string{"howl-1", "howl-2", "nightly"}},
		{`size_bytes desc`, []string{"nightly", "howl-2", "howl-1"}},
		{`source_table, size_bytes desc`, []string{"howl-2", "nightly", "howl-1"}},
		{` name  DESC `, []string{"nightly", "howl-2", "howl-1"}},
	} {
		order, err := parseBackupOrder(tc.order)
		if err != nil {
			t.Errorf("%q: %v", tc.order, err)
			continue
		}
		bs := testBackups()
		slices.SortFunc(bs, order)
		if got := ids(bs); !slices.Equal(got, tc.want) {
			t.Errorf("%q: got %v, want %v", tc.order, got, tc.want)
		}
	}
	for _, bad := range []string{`owner`, `name sideways`, `name desc extra`, `name,`} {
		if _, err := parseBackupOrder(bad); err == nil {
			t.Errorf("%q: accepted", bad)
		}
	}
}
