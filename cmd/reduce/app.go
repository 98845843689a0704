package main

import (
	"io"
	"strings"

	"github.com/urfave/cli/v2"

	"reduce/replay"
)

// run builds the app, runs it on args and returns the exit status. It is
// what main calls and what the testscript tests call.
func run(args []string, stdout, stderr io.Writer) int {
	app := newApp(stdout, stderr)
	err := app.Run(intersperse(app, args))
	if err != nil {
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
			"minimal input that still triggers the same failure, then writes a regression fixture:\n" +
			"the minimal batch, fixture.json and report.md, in a directory named by op and content\n" +
			"hash under --out, whose conftest.py (reduce's collector) turns every fixture into tests.\n" +
			"Progress goes to stderr; the fixture path is the last line of stdout (--json: one JSON\n" +
			"event per line, the last the summary).\n\n" +
			"Record a batch with the Python module that `reduce recorder` prints.\n\n" +
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
			recorderCommand(),
			fixedCommand(),
			trustCommand(),
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

// intersperse moves a subcommand's flags ahead of its positional arguments,
// so `reduce convert in.npz -o out.bin` works: urfave/cli/v2 stops parsing
// flags at the first positional argument. A "--" ends the flags as usual.
func intersperse(app *cli.App, args []string) []string {
	if len(args) < 2 {
		return args
	}
	var cmd *cli.Command
	at := -1
	for i := 1; i < len(args); i++ {
		if !strings.HasPrefix(args[i], "-") {
			cmd = app.Command(args[i])
			at = i
			break
		}
		if takesValue(app.Flags, args[i]) {
			i++
		}
	}
	if cmd == nil {
		return args
	}
	var flags, positional []string
	rest := args[at+1:]
	for i := 0; i < len(rest); i++ {
		a := rest[i]
		switch {
		case a == "--":
			positional = append(positional, rest[i+1:]...)
			i = len(rest)
		case strings.HasPrefix(a, "-") && a != "-":
			flags = append(flags, a)
			if takesValue(cmd.Flags, a) && i+1 < len(rest) {
				flags = append(flags, rest[i+1])
				i++
			}
		default:
			positional = append(positional, a)
		}
	}
	out := append([]string{}, args[:at+1]...)
	out = append(out, flags...)
	if len(positional) > 0 {
		out = append(out, "--")
		out = append(out, positional...)
	}
	return out
}

// takesValue reports whether arg is a flag of flags that consumes the next
// argument (it has no "=value" of its own and is not boolean).
func takesValue(flags []cli.Flag, arg string) bool {
	name := strings.TrimLeft(arg, "-")
	if strings.Contains(name, "=") {
		return false
	}
	for _, f := range flags {
		for _, n := range f.Names() {
			if n != name {
				continue
			}
			if v, ok := f.(cli.DocGenerationFlag); ok {
				return v.TakesValue()
			}
			return false
		}
	}
	return false
}
