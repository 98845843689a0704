package main

import (
	"errors"
	"fmt"

	"github.com/urfave/cli/v2"

	"reduce/fixtures"
)

func inspectCommand() *cli.Command {
	return &cli.Command{
		Name:      "inspect",
		Usage:     "show what a batch file holds",
		UsageText: "reduce inspect [--json] FILE",
		Description: "Prints a table per tensor (name, dtype, shape, strides, storage offset, layout,\n" +
			"batch axis, bytes), the samples and their ids, the operator and its attributes, the\n" +
			"step the file names (its module, function and file) and the class it rebuilds, the\n" +
			"named tuple and mapping types of its structure, the recorded failure and the\n" +
			"provenance. --json prints one JSON object instead. Control characters from the file\n" +
			"(ESC, CR, C1, bidi overrides) are printed escaped (\\x1b, \\u202e).",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "json", Usage: "print JSON instead of tables"},
			maxSizeFlag(),
		},
		Action: action(func(c *cli.Context) error {
			if c.NArg() != 1 {
				return usagef("inspect takes one batch file, got %d arguments", c.NArg())
			}
			read, b, err := readBatch(c, c.Args().First())
			if err != nil {
				return err
			}
			d := fixtures.Describe(read.Path, b)
			if c.Bool("json") {
				return d.WriteJSON(c.App.Writer)
			}
			return d.WriteText(c.App.Writer)
		}),
	}
}

// readBatch reads the batch file named on the command line, or the rank
// file reduce reads for it (fixtures.ChooseRank, whose note goes to
// stderr), and returns what it read; every failure to read it is bad input
// (exit 2), but this machine's own (fixtures.ErrMachine).
func readBatch(c *cli.Context, path string) (*fixtures.RankChoice, *fixtures.Batch, error) {
	limit, err := maxSize(c)
	if err != nil {
		return nil, nil, err
	}
	choice, err := fixtures.ChooseRank(path, fixtures.WithMaxSize(limit))
	if err != nil {
		return nil, nil, usageErr(err)
	}
	if choice.Note != "" && !c.Bool("quiet") {
		fmt.Fprintf(c.App.ErrWriter, "reduce: %s\n", choice.Note)
	}
	b, err := fixtures.Read(choice.Path, fixtures.WithMaxSize(limit))
	if errors.Is(err, fixtures.ErrMachine) {
		return nil, nil, err // a full TMPDIR is no fault of the file (exit 1)
	}
	if err != nil {
		return nil, nil, usageErr(err)
	}
	return choice, b, nil
}
