// Command reduce turns a recorded failing PyTorch batch into the smallest
// input that still triggers the same failure, and writes it as a regression
// fixture. See the package documentation in doc.go and `reduce --help`.
package main

import (
	"os"

	"reduce/replay"
)

func main() {
	// The go backend re-executes this binary as its worker, one process per
	// candidate; the worker never goes through the CLI.
	if len(os.Args) > 1 && os.Args[1] == replay.WorkerCommand {
		os.Exit(replay.Worker(os.Args[1:], os.Stdin, os.Stdout, os.Stderr, os.Getenv))
	}
	os.Exit(run(os.Args, os.Stdout, os.Stderr))
}
