// Command tabula is Tabula's one binary: the servers, the admin and data
// verbs, and the analytics tools, as subcommands.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

func main() {
	root := &cobra.Command{
		Use:           "tabula",
		Short:         "Tabula: an open Bigtable with batch analytics",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newDemoCommand())
	root.AddCommand(newDevCommand())
	root.AddCommand(newCertsCommand())
	root.AddCommand(newMasterCommand())
	root.AddCommand(newTabletServerCommand())
	root.AddCommand(newWorkerCommand())
	root.AddCommand(newCLICommands()...)
	root.AddCommand(newEmulatorCommand())
	root.AddCommand(newLoadCommand())
	root.AddCommand(newBenchCommand())
	root.AddCommand(newScriptCommand())
	root.AddCommand(newMRCommand())
	root.AddCommand(newExportCommand(), newImportCommand())
	if err := root.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "tabula:", err)
		os.Exit(1)
	}
}
