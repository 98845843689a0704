package main

import (
	"encoding/json"
	"io"

	"github.com/urfave/cli/v2"

	"reduce/internal/regress"
)

func judgeCommand() *cli.Command {
	return &cli.Command{
		Name: "judge", Hidden: true, // the pytest plugin's
		Usage:     "judge one run of a fixture's batch, as the reduction judged its replays",
		UsageText: "reduce judge DIR < run.json",
		Description: "The pytest plugin runs a fixture's batches and reports each run on stdin (regress.Run:\n" +
			"the batch, its exit, its stderr or traceback, its outputs); this prints the verdict as JSON:\n" +
			`{"outcome": "recorded" | "other" | "pass", "why": ...} (docs/CLI.md, "reduce judge").`,
		Action: action(func(c *cli.Context) error {
			if c.NArg() != 1 {
				return usagef("judge: give one fixture directory (reduce judge DIR < run.json)")
			}
			f, err := regress.ReadFixture(c.Args().First())
			if err != nil {
				return usageErr(err)
			}
			var run regress.Run
			if err := json.NewDecoder(io.LimitReader(c.App.Reader, 1<<30)).Decode(&run); err != nil {
				return usagef("judge: the run on stdin: %v", err)
			}
			v, err := regress.JudgeRun(f, run)
			if err != nil {
				return usageErr(err)
			}
			return json.NewEncoder(c.App.Writer).Encode(v)
		}),
	}
}
