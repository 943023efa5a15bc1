package main

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/tabuladb/tabula/storage/cluster"
)

// TestCLIBackupVerbs runs the backup verbs and undelete against an
// in-process `tabula dev` with an undelete retention: output, the restore's
// progress, and bad input (a clear message, a non-zero exit — an error
// here — and nothing changed).
func TestCLIBackupVerbs(t *testing.T) {
	srv, err := cluster.StartDev(context.Background(), cluster.DevConfig{
		Dir: t.TempDir(), Addr: "127.0.0.1:0", Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		UndeleteRetention: time.Hour,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	addr := srv.Addr()
	row := []string{"com.cnn.www", `"<html>v1"`}
	runCLISteps(t, addr, []cliStep{
		{args: []string{"createtable", "web", "families=contents,anchor"}},
		{args: []string{"set", "web", "com.cnn.www", "contents:@1700000000000000=<html>v1"}},
		{args: []string{"createtable", "logs", "families=f"}},
		{args: []string{"set", "logs", "l1", "f:=" + strings.Repeat("x", 3000)}},
		{args: []string{"createbackup", "web", "wb"}, contain: []string{"backup wb of web: ", " bytes, expires "}},
		{args: []string{"createbackup", "logs", "lb", "--ttl", "2d"}, contain: []string{"backup lb of logs: "}},
		{args: []string{"listbackups"}, contain: []string{"BACKUP", "SOURCE TABLE", "\nlb ", "\nwb ", "READY"}},
	})
	// Newest first by default; ordered as asked.
	for _, tc := range []struct {
		args  []string
		first string
	}{
		{[]string{"listbackups"}, "lb"},
		{[]string{"listbackups", "--order-by", "name desc"}, "wb"},
		{[]string{"listbackups", "--order-by", "start_time"}, "wb"},
		{[]string{"listbackups", "--order-by", "size_bytes desc"}, "lb"},
	} {
		out, _, err := runTabula(t, append(tc.args, "--addr", addr)...)
		lines := strings.Split(out, "\n")
		if err != nil || len(lines) < 3 || !strings.HasPrefix(lines[1], tc.first+" ") {
			t.Fatalf("%v: %v\n%s\nwant %s first", tc.args, err, out, tc.first)
		}
	}
	runCLISteps(t, addr, []cliStep{
		// Filtered as asked.
		{args: []string{"listbackups", "--filter", "source_table:logs"}, contain: []string{"\nlb "}, absent: []string{"\nwb "}},
		{args: []string{"listbackups", "--filter", "size_bytes > 2000 OR name:wb"}, contain: []string{"\nlb ", "\nwb "}},
		{args: []string{"getbackup", "wb"}, contain: []string{"Name:          projects/tabula/instances/dev/clusters/tabula/backups/wb", "Source table:  web", "State:         READY"}},
		{args: []string{"updatebackup", "wb", "--ttl", "3d"}, contain: []string{"backup wb expires "}},
		{args: []string{"restore", "wb", "web2"}, contain: []string{"restored web2 from backup wb in "}},
		{args: []string{"lookup", "web2", "com.cnn.www"}, contain: row},
		{args: []string{"deletetable", "web"}},
		{args: []string{"ls"}, absent: []string{"web\n"}, contain: []string{"web2\n"}},
		{args: []string{"createtable", "web"}, errWant: "FAILED_PRECONDITION"},
		{args: []string{"undelete", "web"}, want: "undeleted web\n"},
		{args: []string{"lookup", "web", "com.cnn.www"}, contain: row},
		{args: []string{"deletebackup", "wb"}},
		{args: []string{"getbackup", "wb"}, errWant: "NOT_FOUND"},
		// Bad input: the server's code naming the field, or a usage hint.
		{args: []string{"undelete", "web"}, errWant: "ALREADY_EXISTS"},
		{args: []string{"undelete", "never"}, errWant: "NOT_FOUND: name: no deleted table"},
		{args: []string{"createbackup", "web", "short", "--ttl", "1h"}, errWant: "INVALID_ARGUMENT: backup.expire_time"},
		{args: []string{"createbackup", "web", "x", "--ttl", "soon"}, errWant: `--ttl "soon"`},
		{args: []string{"createbackup", "nope", "x"}, errWant: "NOT_FOUND"},
		{args: []string{"createbackup", "web", "-bad"}, errWant: "unknown shorthand flag"},
		{args: []string{"createbackup", "web", "bad id"}, errWant: "INVALID_ARGUMENT: backup_id"},
		{args: []string{"createbackup", "web"}, errWant: "usage: tabula createbackup"},
		{args: []string{"restore", "nope", "t2"}, errWant: "NOT_FOUND: backup"},
		{args: []string{"restore", "lb", "web"}, errWant: "ALREADY_EXISTS"},
		{args: []string{"updatebackup", "lb"}, errWant: "--ttl is required"},
		{args: []string{"updatebackup", "lb", "--ttl", "200d"}, errWant: "INVALID_ARGUMENT: backup.expire_time"},
		{args: []string{"listbackups", "--filter", "owner:bob"}, errWant: `INVALID_ARGUMENT: filter: unknown field "owner"`},
		{args: []string{"listbackups", "--order-by", "size_bytes sideways"}, errWant: "INVALID_ARGUMENT: order_by"},
		{args: []string{"deletebackup", "nope"}, errWant: "NOT_FOUND"},
		{args: []string{"listbackups"}, contain: []string{"\nlb "}, absent: []string{"\nwb ", "short", "\nx "}},
		// --purge: deleted at once, the name free again.
		{args: []string{"deletetable", "web2", "--purge"}},
		{args: []string{"undelete", "web2"}, errWant: "NOT_FOUND"},
		{args: []string{"createtable", "web2"}},
	})
	// bench drops and re-creates its scratch table: twice in a row on a
	// server that keeps deleted tables.
	for range 2 {
		if _, _, err := runTabula(t, "bench", "--addr", addr, "--rows", "40", "--concurrency", "2", "--value-size", "50", "--workloads", "seqwrite"); err != nil {
			t.Fatalf("bench against a server with an undelete retention: %v", err)
		}
	}
	// The restore's progress goes to stderr.
	_, stderr, err := runTabula(t, "restore", "lb", "logs2", "--addr", addr)
	if err != nil || !strings.Contains(stderr, "restore: 100%") {
		t.Fatalf("restore: %v; stderr %q, want the progress up to 100%%", err, stderr)
	}
}
