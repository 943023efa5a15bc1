package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"cloud.google.com/go/bigtable/bttest"
	"github.com/spf13/cobra"
	"google.golang.org/grpc"
)

// startEmulator runs the Cloud Bigtable emulator in this process for one
// test and returns its address.
func startEmulator(t *testing.T) string {
	t.Helper()
	srv, err := bttest.NewServer("127.0.0.1:0", grpc.MaxRecvMsgSize(maxMessageSize), grpc.MaxSendMsgSize(maxMessageSize))
	if err != nil {
		t.Fatalf("start emulator: %v", err)
	}
	t.Cleanup(srv.Close)
	return srv.Addr
}

// runTabula runs the binary's commands in this process, as main does, and
// returns what they printed.
func runTabula(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	root := &cobra.Command{Use: "tabula", SilenceUsage: true, SilenceErrors: true}
	root.AddCommand(newCLICommands()...)
	root.AddCommand(newLoadCommand(), newBenchCommand(), newEmulatorCommand(), newScriptCommand(), newMRCommand(),
		newExportCommand(), newImportCommand())
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(args)
	err = root.ExecuteContext(context.Background())
	return out.String(), errOut.String(), err
}

// emulatorProcessEnv makes the test binary act as `tabula emulator`, so
// bench's subprocess path runs under go test (the test binary is not
// the tabula binary, so it cannot re-execute itself with "emulator").
const emulatorProcessEnv = "TABULA_TEST_EMULATOR_PROCESS"

// TestEmulatorProcess checks runEmulator in process: it announces an
// address that serves the admin API, and returns when its context ends.
// Run with emulatorProcessEnv set, it is instead the emulator subprocess
// of the bench tests.
func TestEmulatorProcess(t *testing.T) {
	if os.Getenv(emulatorProcessEnv) == "1" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		if err := runEmulator(ctx, "127.0.0.1:0", os.Stdout); err != nil {
			t.Fatal(err)
		}
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- runEmulator(ctx, "127.0.0.1:0", pw) }()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), emulatorReadyPrefix)
	if !ok {
		t.Fatalf("emulator announced %q, want %q + address", line, emulatorReadyPrefix)
	}
	if _, _, err := runTabula(t, "createtable", "t", "--addr", addr); err != nil {
		t.Fatalf("createtable against the emulator: %v", err)
	}
	out, _, err := runTabula(t, "ls", "--addr", addr)
	if err != nil || out != "t\n" {
		t.Fatalf("ls = %q, %v; want the table t", out, err)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("runEmulator: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("runEmulator did not return after its context ended")
	}
}
