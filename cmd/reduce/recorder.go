package main

import (
	"github.com/urfave/cli/v2"

	"reduce/replay"
)

func recorderCommand() *cli.Command {
	return &cli.Command{
		Name:      "recorder",
		Usage:     "print the Python recorder module (" + replay.PythonModuleName + "), with --hooks the framework hooks (" + replay.HooksModuleName + "), with --zip the whole package",
		UsageText: "reduce recorder > " + replay.PythonModuleName + "\nreduce recorder --hooks > " + replay.HooksModuleName + "\nreduce recorder --zip > " + replay.ZipName,
		Description: "For a program that should not change, `reduce record -- python train.py` records it with no line of it changed.\n" +
			"The module needs only the standard library and torch. In the training loop:\n\n" +
			"   import reduce_batch\n" +
			"   with reduce_batch.record_on_failure(\"crash.bin\", batch, step=train_step):\n" +
			"       train_step(batch)\n\n" +
			"Keep the CPU tensors (before .to(device)): after a device-side assert the GPU copy cannot be read back.\n" +
			"The hooks (PyTorch Lightning's callback) are a second file beside it, of the same version:\n\n" +
			"   trainer = L.Trainer(callbacks=[reduce_hooks.lightning_callback(\"crash.bin\")])",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "hooks", Usage: "print " + replay.HooksModuleName + ", the framework hooks, instead"},
			&cli.BoolFlag{Name: "zip", Usage: "print the whole package (load, the hooks, the pytest plugin) as " + replay.ZipName + " instead, for sys.path"},
		},
		Action: action(func(c *cli.Context) error {
			module := replay.PythonModule
			switch {
			case c.NArg() > 0:
				return usagef("recorder takes no arguments")
			case c.Bool("hooks") && c.Bool("zip"):
				return usagef("recorder: --hooks or --zip, not both")
			case c.Bool("hooks"):
				module = replay.HooksModule
			case c.Bool("zip"):
				module = replay.PackageZip()
			}
			_, err := c.App.Writer.Write(module)
			return err
		}),
	}
}
