package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/urfave/cli/v2"

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
	b, err := readBatch(c, path)
	if err != nil {
		return err
	}
	if b.Samples == 0 {
		return usagef("%s: the batch has no samples to reduce", path)
	}
	be, err := newBackend(c, path, b)
	if err != nil {
		return err
	}
	defer be.Close()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	rep := newReporter(c.App.Writer, c.App.ErrWriter, c.Bool("json"), c.Bool("quiet"))
	defer rep.close()
	o.Events = rep.handle
	res, err := reduction.Run(ctx, b, be, o)
	if res != nil {
		rep.close() // the bar goes before the summary: they may share a terminal
		if c.Bool("json") {
			rep.event(newSummary(res))
		} else {
			printSummary(c.App.Writer, res)
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
		return usagef("unknown command %q: did you mean --batch %s?", arg, regress.ShellQuote(arg))
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
		Jobs: c.Int("jobs"), Resume: c.Bool("resume")}
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

// summary is the last JSON line of --json (DESIGN.md, "The CLI").
type summary struct {
	Event         string                                   `json:"event"`
	Fixture       string                                   `json:"fixture"`
	Fixtures      []string                                 `json:"fixtures"`
	Signature     signature.Signature                      `json:"signature"`
	SignatureNote string                                   `json:"signature_note,omitempty"`
	Mode          reduction.Mode                           `json:"mode"`
	ModeReason    string                                   `json:"mode_reason"`
	Culprits      []regress.Culprit                        `json:"culprits"`
	Size          *regress.SizeResult                      `json:"size"`
	Shape         *regress.ShapeResult                     `json:"shape,omitempty"`
	Replays       int                                      `json:"replays"`
	Resumed       int                                      `json:"resumed"`
	Phases        map[reduction.Phase]reduction.PhaseCount `json:"phases"`
	OtherFailures []regress.OtherFailure                   `json:"other_failures"`
	// Launcher is where the replays ran; for Slurm with the jobs
	// submitted, retried and lost.
	Launcher replay.LaunchInfo `json:"launcher"`
	Seconds  float64           `json:"seconds"`
	Partial  bool              `json:"partial"`
}

func newSummary(res *reduction.Result) summary {
	s := summary{Event: "summary", Fixture: res.Fixtures[0], Fixtures: res.Fixtures, Signature: res.Want, SignatureNote: res.WantNote, Mode: res.Mode,
		ModeReason: res.ModeReason, Culprits: []regress.Culprit{}, Size: res.Size, Replays: res.Replays, Resumed: res.Resumed,
		Phases: res.Phases, OtherFailures: res.OtherFailures, Launcher: res.Launch, Seconds: res.Seconds, Partial: res.Partial}
	for i, f := range res.Findings {
		s.Culprits = append(s.Culprits, f.Culprit(res.Fixtures[i]))
		if s.Shape == nil {
			s.Shape = f.Shape
		}
	}
	return s
}

// printSummary prints the result for a person; the fixture path is the
// last line.
func printSummary(w interface{ Write([]byte) (int, error) }, res *reduction.Result) {
	fmt.Fprintf(w, "signature: %s\n", res.Want)
	if res.WantNote != "" {
		fmt.Fprintf(w, "  (%s)\n", res.WantNote)
	}
	fmt.Fprintf(w, "mode: %s (%s)\n", res.Mode, res.ModeReason)
	if res.Size != nil {
		fmt.Fprintf(w, "size: %d samples fail, %d pass\n", res.Size.SmallestFailing, res.Size.LargestPassing)
	}
	for i, f := range res.Findings {
		if res.Mode != reduction.ModeSize {
			fmt.Fprintln(w, strings.TrimSpace(fmt.Sprintf("culprit: samples %v %s", f.Indices, strings.Join(f.IDs, " "))))
		}
		if f.Relation != nil {
			fmt.Fprintf(w, "  relation: %s (equal values fail; either one changed to a value found nowhere in the batch passes)\n", f.Relation.Text)
		}
		for k, e := range f.Elements {
			if f.Relation != nil && k < len(f.Relation.Elements) {
				continue
			}
			fmt.Fprintf(w, "  %s\n", e.Diagnosis())
		}
		switch {
		case f.Shape != nil:
			fmt.Fprintf(w, "  shape: %s\n", f.Shape.Text)
		case f.ContentFree && res.Mode != reduction.ModeSize && f.Relation == nil:
			fmt.Fprintf(w, "  no value triggers it: every element neutralized still fails\n")
		}
		if len(res.Findings) > 1 {
			fmt.Fprintf(w, "  fixture: %s\n", res.Fixtures[i])
		}
	}
	for _, o := range res.OtherFailures {
		fmt.Fprintf(w, "other failure (not followed), %d times: %s\n", o.Count, o.Signature)
	}
	if l := res.Launch; l.Launcher == replay.LauncherSlurm {
		lost := 0
		for _, n := range l.Unresolved {
			lost += n
		}
		fmt.Fprintf(w, "slurm: %d jobs on %s, %d retried, %d lost %v\n", l.Jobs, strings.Join(l.Nodes, ","), l.Retried, lost, l.Unresolved)
	}
	resumed := ""
	if res.Resumed > 0 {
		resumed = fmt.Sprintf(", %d answers from the journal", res.Resumed)
	}
	state := ""
	if res.Partial {
		state = " (interrupted: partial)"
	}
	fmt.Fprintf(w, "replays: %d in %.1fs%s%s\n", res.Replays, res.Seconds, resumed, state)
	fmt.Fprintln(w, res.Fixtures[0])
}
