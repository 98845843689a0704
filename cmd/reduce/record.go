package main

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"reduce/fixtures"
	"reduce/replay"
)

func recordCommand() *cli.Command {
	return &cli.Command{
		Name:      "record",
		Usage:     "run a training command as it is, and record the batch whose step raised (exits with the command's status)",
		UsageText: "reduce record [-o crash.bin] [--batch-fn MODULE:FUNCTION] [--state] -- python train.py ARGS...",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "o", Aliases: []string{"out"}, Value: "crash.bin", Usage: "the crash file (a distributed run's ranks: crash.rank{R}.bin)"},
			&cli.StringFlag{Name: "batch-fn", Usage: "the function that makes the batches, for a loop with no DataLoader (a script's: SCRIPT:FUNCTION)"},
			&cli.BoolFlag{Name: "state", Usage: "also record the weights and optimizer state the failing frames hold"},
		},
		Action: action(func(c *cli.Context) error {
			r, err := replay.Record(c.Context, replay.RecordOptions{
				Out: c.String("o"), BatchFn: c.String("batch-fn"), State: c.Bool("state"), Argv: c.Args().Slice(),
			})
			if err != nil {
				return usageErr(err) // nothing ran
			}
			for _, f := range r.Files {
				fmt.Fprintf(c.App.ErrWriter, "reduce: next: reduce --batch %s\n", fixtures.ShellQuote(f))
			}
			return &exitError{code: r.Status, err: errQuiet}
		}),
	}
}
