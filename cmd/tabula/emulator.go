package main

// The hidden `tabula emulator` subcommand: the Cloud Bigtable emulator
// (bttest) in its own process, so `tabula bench --compare-emulator`
// measures it over real loopback gRPC without sharing a heap or a
// scheduler with the client.

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"cloud.google.com/go/bigtable/bttest"
	"github.com/spf13/cobra"
	"google.golang.org/grpc"
)

// emulatorReadyPrefix starts the one line the emulator prints when it
// serves; the rest of the line is its address.
const emulatorReadyPrefix = "emulator listening on "

func newEmulatorCommand() *cobra.Command {
	var addr string
	cmd := &cobra.Command{
		Use:    "emulator",
		Short:  "Run the Cloud Bigtable emulator (bttest) until SIGTERM or SIGINT",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runEmulator(ctx, addr, cmd.OutOrStdout())
		},
	}
	cmd.Flags().StringVar(&addr, "addr", "127.0.0.1:0", "address to listen on (port 0: any free port)")
	return cmd
}

// runEmulator serves the emulator on addr until ctx ends, announcing its
// address on out.
func runEmulator(ctx context.Context, addr string, out io.Writer) error {
	srv, err := bttest.NewServer(addr, grpc.MaxRecvMsgSize(maxMessageSize), grpc.MaxSendMsgSize(maxMessageSize))
	if err != nil {
		return fmt.Errorf("start emulator on %s: %w", addr, err)
	}
	defer srv.Close()
	if _, err := fmt.Fprintf(out, "%s%s\n", emulatorReadyPrefix, srv.Addr); err != nil {
		return err
	}
	<-ctx.Done()
	return nil
}
