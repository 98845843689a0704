package main

import (
	"fmt"
	"github.com/urfave/cli/v2"
	"path/filepath"

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
			path, _, err := rankFile(c, c.Args().First())
			if err != nil {
				return err
			}
			b, err := readBatch(c, path)
			if err != nil {
				return err
			}
			d := fixtures.Describe(path, b)
			if c.Bool("json") {
				return d.WriteJSON(c.App.Writer)
			}
			return d.WriteText(c.App.Writer)
		}),
	}
}

// readBatch reads a batch file named on the command line; every failure to
// read it is bad input (exit 2).
func readBatch(c *cli.Context, path string) (*fixtures.Batch, error) {
	limit, err := maxSize(c)
	if err != nil {
		return nil, err
	}
	b, err := fixtures.Read(path, fixtures.WithMaxSize(limit))
	if err != nil {
		return nil, usageErr(err)
	}
	return b, nil
}

// rankFile is the file to read for path: path itself, or, where it is not
// there and a torch.distributed run wrote rank files beside it, the rank
// file whose failure came first (fixtures.ChooseRank), said on stderr.
func rankFile(c *cli.Context, path string) (string, *fixtures.RankChoice, error) {
	limit, err := maxSize(c)
	if err != nil {
		return "", nil, err
	}
	choice, err := fixtures.ChooseRank(path, fixtures.WithMaxSize(limit))
	if err != nil {
		return "", nil, usageErr(err)
	}
	if choice == nil {
		if ranks, _ := fixtures.RankFiles(path, fixtures.WithMaxSize(limit)); len(ranks) > 0 && !c.Bool("quiet") {
			fmt.Fprintf(c.App.ErrWriter, "reduce: reading %s; %d rank files of a torch.distributed run lie beside it (%s, ...): give --batch with one of them to replay it\n",
				path, len(ranks), filepath.Base(ranks[0].Path))
		}
		return path, nil, nil
	}
	if !c.Bool("quiet") {
		fmt.Fprintf(c.App.ErrWriter, "reduce: %s\n", choice.Note(path))
	}
	return choice.Chosen.Path, choice, nil
}
