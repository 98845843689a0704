package main

import (
	"errors"
	"fmt"

	"github.com/urfave/cli/v2"

	"reduce/fixtures"
	"reduce/internal/regress"
	"reduce/internal/trust"
)

func trustCommand() *cli.Command {
	return &cli.Command{
		Name:      "trust",
		Usage:     "let batch files or fixture directories from elsewhere run what they name, once you have read it",
		UsageText: "reduce trust [--forget] PATH...",
		Description: "A file or fixture from someone else runs nothing it names. This prints what each PATH (a\n" +
			"batch file, or a fixture directory) runs: its step, the class it rebuilds, its interpreter,\n" +
			"its --entry or command; and records its bytes in your trust store as yours, so that reduce\n" +
			"--batch, reduce replay and the fixtures' tests run them. Your recordings, the fixtures reduce\n" +
			"writes from them, and the fixtures your repository commits need no trust. --forget takes it back.",
		Flags:  []cli.Flag{&cli.BoolFlag{Name: "forget", Usage: "remove PATH from the trust store"}},
		Action: action(allow),
	}
}

func allow(c *cli.Context) error {
	if c.NArg() == 0 {
		return usagef("trust: give the batch files or fixture directories (reduce trust PATH...)")
	}
	store, err := trust.DefaultStore()
	if err != nil {
		return usageErr(err)
	}
	var errs []error
	for _, path := range c.Args().Slice() {
		said, err := regress.Allow(store, path, c.Bool("forget"))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		fmt.Fprintf(c.App.Writer, "%s: %s\n", fixtures.Printable(path), said)
	}
	return usageErr(errors.Join(errs...))
}
