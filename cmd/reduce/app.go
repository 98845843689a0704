package main

import (
	"errors"
	"io"

	"github.com/urfave/cli/v2"

	"reduce/internal/cliargs"
	"reduce/replay"
)

// run builds the app, runs it on args and returns the exit status. It is
// what main calls and what the testscript tests call.
func run(args []string, stdout, stderr io.Writer) int {
	app := newApp(stdout, stderr)
	err := app.Run(cliargs.Intersperse(app, args))
	if err != nil && !errors.Is(err, errQuiet) {
		report(stderr, err)
	}
	return exitCode(err)
}

func newApp(stdout, stderr io.Writer) *cli.App {
	app := &cli.App{
		Name:      "reduce",
		Version:   replay.Version,
		Usage:     "shrink a recorded failing PyTorch batch to the smallest input that fails the same way",
		UsageText: "reduce --batch crash.bin [flags]\nreduce COMMAND [flags] ARGS",
		Description: "reduce replays subsets of a recorded batch, each in a fresh process, until it has the\n" +
			"minimal input that still triggers the same failure, then writes a regression fixture under\n" +
			"--out, which reduce's pytest plugin turns into tests. Progress goes to stderr; the fixture\n" +
			"path is the last line of stdout (--json: one JSON event per line, the last the summary).\n\n" +
			"Examples:\n" +
			"   reduce --batch crash.bin                          # reduce with the built-in kernels\n" +
			"   reduce --batch crash.bin --backend torch --device cuda -j 4\n" +
			"   reduce --batch crash.bin --backend exec --replay 'python step.py {batch}'\n" +
			"   reduce --batch oom.bin --backend torch --device cuda   # OOM: the largest size that passes\n" +
			"   reduce --batch crash.bin --resume                 # continue after Ctrl-C\n" +
			"   reduce recorder > reduce_batch.py     # the recorder, for the training loop\n" +
			"   reduce fixed fixtures/regress/DIR      # its bug is fixed: the fixture guards the fix\n" +
			"   reduce inspect crash.bin              # what the batch holds\n" +
			"   reduce replay crash.bin               # one replay: does it reproduce?\n" +
			"   reduce convert batch.npz -o crash.bin --op cross_entropy\n\n" +
			"Exit codes: 0 done, 1 internal error, 2 bad usage or bad input,\n" +
			"3 the original does not reproduce, 4 interrupted (a partial fixture was written).",
		Writer:          stdout,
		ErrWriter:       stderr,
		HideHelpCommand: true,
		Flags:           mainFlags(),
		Action:          action(mainJob),
		Commands: []*cli.Command{
			inspectCommand(),
			convertCommand(),
			replayCommand(),
			recordCommand(),
			recorderCommand(),
			fixedCommand(),
			trustCommand(),
			judgeCommand(),
		},
		// Errors are printed and mapped to exit codes by run, not by the
		// library (which would call os.Exit from inside tests).
		ExitErrHandler: func(*cli.Context, error) {},
		OnUsageError:   onUsageError,
	}
	// A command without a handler of its own would print "Incorrect
	// Usage" and its whole help on stdout, where results go.
	for _, cmd := range app.Commands {
		cmd.OnUsageError = onUsageError
	}
	return app
}

// onUsageError turns a flag urfave/cli could not parse into bad usage that
// names the help to read: `reduce --help` for the main job, `reduce
// COMMAND --help` for a command.
func onUsageError(c *cli.Context, err error, isSubcommand bool) error {
	help := "reduce --help"
	if isSubcommand && c.Command != nil {
		help = "reduce " + c.Command.Name + " --help"
	}
	return usagef("%v (see %s)", err, help)
}
