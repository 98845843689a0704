package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/urfave/cli/v2"

	"reduce/fixtures"
	"reduce/internal/regress"
	"reduce/internal/trust"
)

func inspectCommand() *cli.Command {
	return &cli.Command{
		Name:      "inspect",
		Usage:     "show what a batch file holds",
		UsageText: "reduce inspect [--json] FILE|DIR",
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
			if st, err := os.Stat(c.Args().First()); err == nil && st.IsDir() { // a fixture directory
				wd, _ := os.Getwd()
				d, err := regress.DescribeFixture(c.Args().First(), wd)
				if err != nil {
					return usageErr(err)
				}
				if c.Bool("json") {
					return writeJSON(c.App.Writer, d)
				}
				return d.WriteText(c.App.Writer)
			}
			read, b, v, err := readBatch(c, c.Args().First())
			if err != nil {
				return err
			}
			d := fixtures.Describe(read.Path, b)
			d.Mine, d.Trust = v.Mine, v.How
			if c.Bool("json") {
				return d.WriteJSON(c.App.Writer)
			}
			return d.WriteText(c.App.Writer)
		}),
	}
}

// readBatch reads the batch file named on the command line, or the rank
// file reduce reads for it (fixtures.ChooseRank, whose note goes to
// stderr), and returns what it read, with the trust verdict on the bytes it
// read (trust.Of); every failure to read it is bad input (exit 2), but this
// machine's own (fixtures.ErrMachine).
func readBatch(c *cli.Context, path string) (*fixtures.RankChoice, *fixtures.Batch, trust.Verdict, error) {
	limit, err := maxSize(c)
	if err != nil {
		return nil, nil, trust.Verdict{}, err
	}
	choice, err := fixtures.ChooseRank(path, fixtures.WithMaxSize(limit))
	if err != nil {
		return nil, nil, trust.Verdict{}, usageErr(err)
	}
	if choice.Note != "" && !c.Bool("quiet") {
		fmt.Fprintf(c.App.ErrWriter, "reduce: %s\n", fixtures.Printable(choice.Note))
	}
	var digest string
	b, err := fixtures.Read(choice.Path, fixtures.WithMaxSize(limit), fixtures.WithDigest(&digest))
	if errors.Is(err, fixtures.ErrMachine) {
		return nil, nil, trust.Verdict{}, err // a full TMPDIR is no fault of the file (exit 1)
	}
	if err != nil {
		return nil, nil, trust.Verdict{}, usageErr(err)
	}
	return choice, b, trust.Of(digest, b.Runs()), nil
}
