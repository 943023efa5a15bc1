package main

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tabuladb/tabula/storage/cluster"
)

// startAuthDev starts tabula dev with authentication on, configured by the
// role flags: a token file of root (superuser), alice and bob.
func startAuthDev(t *testing.T) (addr string, tokens map[string]string) {
	t.Helper()
	dir := t.TempDir()
	tokens = map[string]string{"root": "root-token-0123456789abcdef", "alice": "alice-token-0123456789abcdef", "bob": "bob-token-0123456789abcdef"}
	file := filepath.Join(dir, "tokens")
	content := ""
	for p, tok := range tokens {
		content += tok + " " + p + "\n"
	}
	if err := os.WriteFile(file, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	af := serverAuthFlags{tokenFile: file, superusers: []string{"user:root"}, cacheTTL: 1}
	ac, err := af.config(log, "dev", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := cluster.DevConfig{Dir: filepath.Join(dir, "data"), Addr: "127.0.0.1:0", Logger: log, Auth: ac}
	// The MapReduce worker on the dev port, behind the same guard.
	stopWorker, err := devWorker(&cfg, &workerFlags{slots: 2, sortMemory: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	d, err := cluster.StartDev(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close(); stopWorker() })
	return d.Addr(), tokens
}

// TestCLIGrants: grant, acl and revoke, and the verbs as principals with
// and without the grants, by --token and $TABULA_TOKEN.
func TestCLIGrants(t *testing.T) {
	addr, tok := startAuthDev(t)
	as := func(who string, args ...string) []string { return append(args, "--token", tok[who]) }
	runCLISteps(t, addr, []cliStep{
		{args: []string{"ls"}, errWant: "UNAUTHENTICATED"},
		{args: as("alice", "createtable", "users", "families=profile,secret"), errWant: "PERMISSION_DENIED"},
		{args: as("root", "createtable", "users", "families=profile,secret")},
		{args: as("root", "set", "users", "u1", "profile:name=Alice", "secret:ssn=ssn-value-x9")},
		{args: as("alice", "lookup", "users", "u1"), errWant: "PERMISSION_DENIED"},
		{args: as("root", "grant", "users", "user:alice", "read", "family=profile"), contain: []string{"user:alice  profile  read"}},
		{args: as("root", "grant", "users", "group:ops", "read,write"), contain: []string{"group:ops   *        read,write"}},
		{args: as("root", "grant", "users", "alice", "read"), errWant: "user:NAME or group:NAME"},
		{args: as("root", "grant", "users", "user:alice", "owner"), errWant: `unknown permission "owner"`},
		{args: as("root", "grant", "users", "user:alice", "admin", "family=profile"), errWant: "table-wide"},
		{args: as("root", "acl", "users"), want: "MEMBER      FAMILY   PERMISSIONS\ngroup:ops   *        read,write\nuser:alice  profile  read\n"},
		{args: as("alice", "lookup", "users", "u1"), contain: []string{"profile:name"}, absent: []string{"secret", "ssn-value"}},
		{args: as("alice", "set", "users", "u1", "profile:name=Eve"), errWant: "no write permission on family profile"},
		{args: as("alice", "acl", "users"), errWant: "PERMISSION_DENIED"},
		{args: as("bob", "ls"), want: ""},
		{args: as("alice", "ls"), want: "users\n"},
		{args: as("root", "revoke", "users", "user:alice"), absent: []string{"alice"}, contain: []string{"group:ops"}},
		{args: as("root", "acl", "users"), want: "MEMBER     FAMILY  PERMISSIONS\ngroup:ops  *       read,write\n"},
		{args: as("alice", "lookup", "users", "u1"), errWant: "PERMISSION_DENIED"},
	})
	// MapReduce runs as its submitter: its tasks (on the dev server's
	// worker) read with the submitter's token.
	out, _, err := runTabula(t, as("root", "mr", "run", "rowcounter", "users", "--addr", addr, "--min-workers", "1")...)
	if err != nil || mrCounter(t, out, "ROWS") != "1" {
		t.Errorf("mr as root: %v\n%s", err, out)
	}
	if _, _, err := runTabula(t, as("bob", "mr", "run", "rowcounter", "users", "--addr", addr, "--min-workers", "1")...); err == nil || !strings.Contains(err.Error(), "PERMISSION_DENIED") {
		t.Errorf("mr as bob (no grant): %v", err)
	}
	if _, _, err := runTabula(t, "mr", "run", "rowcounter", "users", "--addr", addr); err == nil || !strings.Contains(err.Error(), "UNAUTHENTICATED") {
		t.Errorf("mr without a token: %v", err)
	}
	t.Setenv("TABULA_TOKEN", tok["root"])
	runCLISteps(t, addr, []cliStep{{args: []string{"lookup", "users", "u1"}, contain: []string{"secret:ssn"}}})
}
