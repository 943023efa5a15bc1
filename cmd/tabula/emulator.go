package main

// The hidden `tabula emulator` subcommand: the Cloud Bigtable emulator
// (bttest) in its own process, so `tabula bench --compare-emulator`
// measures it over real loopback gRPC without sharing a heap or a
// scheduler with the client.

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

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

// emulatorProcess is a running emulator subprocess.
type emulatorProcess struct {
	cmd  *exec.Cmd
	addr string
	done chan error
}

// startEmulatorProcess starts the emulator and waits for the line with
// its address.
func startEmulatorProcess(b benchConfig) (*emulatorProcess, error) {
	mk := b.emulatorCmd
	if mk == nil {
		mk = func() (*exec.Cmd, error) {
			self, err := os.Executable()
			if err != nil {
				return nil, err
			}
			return exec.Command(self, "emulator", "--addr", "127.0.0.1:0"), nil
		}
	}
	cmd, err := mk()
	if err != nil {
		return nil, fmt.Errorf("emulator command: %w", err)
	}
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start emulator: %w", err)
	}
	p := &emulatorProcess{cmd: cmd, done: make(chan error, 1)}
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if a, ok := strings.CutPrefix(sc.Text(), emulatorReadyPrefix); ok {
				lines <- a
				break
			}
		}
		// Keep draining so the child never blocks on a full pipe.
		_, _ = io.Copy(io.Discard, stdout)
		p.done <- cmd.Wait()
	}()
	select {
	case p.addr = <-lines:
		return p, nil
	case err := <-p.done:
		return nil, fmt.Errorf("emulator exited before it served: %v", err)
	case <-time.After(30 * time.Second):
		_ = p.stop()
		return nil, fmt.Errorf("emulator did not announce its address within 30s")
	}
}

// stop asks the emulator to exit and kills it if it does not in time.
func (p *emulatorProcess) stop() error {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.done:
		return err
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("emulator did not exit on SIGTERM; killed")
	}
}
