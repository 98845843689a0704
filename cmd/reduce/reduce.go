package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"

	"github.com/urfave/cli/v2"

	"reduce/fixtures"
	"reduce/internal/progress"
	"reduce/internal/reduction"
	"reduce/internal/regress"
	"reduce/internal/signature"
	"reduce/replay"
	"reduce/shrink"
)

func mainFlags() []cli.Flag {
	return append([]cli.Flag{
		&cli.StringFlag{Name: "batch", Aliases: []string{"b"}, Usage: "the recorded failing batch `FILE` (crash.bin)"},
		&cli.IntFlag{Name: "confirm", Value: 2, Usage: "replay the original `N` times before reducing"},
		&cli.IntFlag{Name: "trials", Value: 1, Usage: "replay every candidate `N` times; it fails if any trial fails (for flaky failures)"},
		&cli.StringFlag{Name: "match", Value: "strict", Usage: "what counts as the same failure: strict, family or any"},
		&cli.StringFlag{Name: "strategy", Value: "auto", Usage: "the search: auto (group testing) or ddmin"},
		&cli.StringFlag{Name: "out", Value: filepath.Join("fixtures", "regress"), Usage: "write the regression fixture under `DIR`"},
		&cli.BoolFlag{Name: "resume", Usage: "continue an interrupted reduction from its journal under --out: no candidate is replayed twice"},
		&cli.BoolFlag{Name: "json", Usage: "print JSON lines on stdout, one event per line, the last one the summary"},
		&cli.BoolFlag{Name: "quiet", Aliases: []string{"q"}, Usage: "no progress on stderr"},
		maxSizeFlag(),
	}, backendFlags()...)
}

// mainJob is `reduce --batch FILE`: flags to reduction.Options, events to
// the progress bar or JSON lines, the result to the summary and the exit
// code.
func mainJob(c *cli.Context) error {
	if c.NArg() > 0 {
		return unknownCommand(c, c.Args().First())
	}
	path := c.String("batch")
	if path == "" {
		_ = cli.ShowAppHelp(c)
		return usagef("no batch: give --batch FILE (see reduce --help)")
	}
	o, err := reductionOptions(c, path)
	if err != nil {
		return err
	}
	// Before anything is made to clean up, and stopped after all of it is.
	ctx, stop := replay.SignalContext(context.Background())
	defer stop()
	read, b, v, err := readBatch(c, path)
	if err != nil {
		return err
	}
	path, o.Source, o.Ranks = read.Path, read.Path, regress.RanksOf(read)
	if b.Samples == 0 {
		return usagef("%s: the batch has no samples to reduce", path)
	}
	be, err := newBackend(c, path, b, v)
	if err != nil {
		return err
	}
	defer be.Close()
	o.Mine = v.Mine
	o.Plugin = func() bool { return replay.PluginInstalled(c.String("python"), b, v.Mine) }

	rep := progress.New(c.App.Writer, c.App.ErrWriter, c.Bool("json"), c.Bool("quiet"))
	defer rep.Close()
	o.Events = rep.Handle
	res, err := reduction.Run(ctx, b, be, o)
	if res != nil {
		rep.Close() // the bar goes before the summary: they may share a terminal
		if c.Bool("json") {
			rep.Event(res.Summary())
		} else {
			res.WriteText(c.App.Writer)
		}
	}
	switch {
	case err == nil:
		return nil
	case errors.Is(err, reduction.ErrUsage), errors.Is(err, reduction.ErrResume):
		return usageErr(err)
	case errors.Is(err, reduction.ErrNoRepro):
		return withCode(ExitNoRepro, err)
	case errors.Is(err, reduction.ErrInterrupted):
		return withCode(ExitInterrupted, err)
	}
	return err
}

// unknownCommand is the error for a word where a command was expected:
// the batch given without --batch when it names a file (or looks like
// one), else the commands there are.
func unknownCommand(c *cli.Context, arg string) error {
	switch {
	case c.IsSet("batch"):
		return usagef("unexpected argument %q: the batch is --batch %s, and the main job takes no arguments (see reduce --help)", arg, c.String("batch"))
	case looksLikeFile(arg):
		return usagef("unknown command %q: did you mean --batch %s?", arg, fixtures.ShellQuote(arg))
	}
	var names []string
	for _, cmd := range c.App.VisibleCommands() {
		names = append(names, cmd.Name)
	}
	return usagef("unknown command %q: the commands are %s (see reduce --help)", arg, strings.Join(names, ", "))
}

// looksLikeFile reports whether arg names an existing file, or has the
// shape of a path (a separator, or an extension such as .bin).
func looksLikeFile(arg string) bool {
	if st, err := os.Stat(arg); err == nil && !st.IsDir() {
		return true
	}
	return strings.ContainsRune(arg, filepath.Separator) || len(filepath.Ext(arg)) > 1
}

// reductionOptions maps the main job's flags.
func reductionOptions(c *cli.Context, path string) (reduction.Options, error) {
	o := reduction.Options{Source: path, Out: c.String("out"), Confirm: c.Int("confirm"), Trials: c.Int("trials"),
		Jobs: c.Int("jobs"), Resume: c.Bool("resume"), NoCompile: c.Bool("no-compile")}
	var err error
	if o.Match, err = signature.ParseMatchLevel(c.String("match")); err != nil {
		return o, usagef("--match: %v", err)
	}
	switch c.String("strategy") {
	case "auto":
		o.Strategy = shrink.Auto
	case "ddmin":
		o.Strategy = shrink.DDMin
	default:
		return o, usagef("--strategy %q: want auto or ddmin", c.String("strategy"))
	}
	for _, f := range []struct {
		name string
		n    int
	}{{"confirm", o.Confirm}, {"trials", o.Trials}, {"jobs", o.Jobs}} {
		if f.n < 1 {
			return o, usagef("--%s %d: want at least 1", f.name, f.n)
		}
	}
	return o, nil
}
