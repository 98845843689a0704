package main

import (
	"github.com/urfave/cli/v2"

	"reduce/replay"
)

func recorderCommand() *cli.Command {
	return &cli.Command{
		Name:      "recorder",
		Usage:     "print the Python recorder module (" + replay.PythonModuleName + ")",
		UsageText: "reduce recorder > " + replay.PythonModuleName,
		Description: "The module needs only the standard library and torch. In the training loop:\n\n" +
			"   import reduce_batch\n" +
			"   with reduce_batch.record_on_failure(\"crash.bin\", {\"input\": x, \"target\": y}, op=\"cross_entropy\"):\n" +
			"       loss = F.cross_entropy(x.to(device), y.to(device))\n\n" +
			"Keep the CPU tensors (before .to(device)): after a device-side assert the GPU copy cannot be read back.",
		Action: action(func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usagef("recorder takes no arguments")
			}
			_, err := c.App.Writer.Write(replay.PythonModule)
			return err
		}),
	}
}
