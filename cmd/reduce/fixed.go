package main

import (
	"errors"
	"fmt"

	"github.com/urfave/cli/v2"

	"reduce/internal/regress"
)

func fixedCommand() *cli.Command {
	return &cli.Command{
		Name:      "fixed",
		Usage:     "mark regression fixtures fixed: their fixture.json's status from open to fixed",
		UsageText: "reduce fixed DIR...",
		Description: "Once the bug of a fixture is fixed, the collector's test of its minimal batch passes, which\n" +
			"pytest reports as XPASS(strict), a failure, until the fixture is marked fixed; from then on the\n" +
			"test guards the fix. This sets \"status\": \"fixed\" in each DIR/fixture.json (written atomically;\n" +
			"the fixture's name stays: the status is no part of it), as editing the file by hand would.",
		Action: action(func(c *cli.Context) error {
			if c.NArg() == 0 {
				return usagef("fixed: give the fixture directories (reduce fixed DIR...)")
			}
			var errs []error
			for _, dir := range c.Args().Slice() {
				changed, err := regress.MarkFixed(dir)
				switch {
				case err != nil:
					errs = append(errs, err)
				case changed:
					fmt.Fprintf(c.App.Writer, "%s: marked fixed\n", dir)
				default:
					fmt.Fprintf(c.App.Writer, "%s: fixed already\n", dir)
				}
			}
			err := errors.Join(errs...)
			if errors.Is(err, regress.ErrNotFixture) || errors.Is(err, regress.ErrLink) {
				return usageErr(err)
			}
			return err
		}),
	}
}
