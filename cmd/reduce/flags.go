package main

import (
	"github.com/urfave/cli/v2"

	"reduce/fixtures"
)

// defaultMaxSize bounds the storage a batch file may declare (docs/FORMAT.md).
const defaultMaxSize = "4GiB"

func maxSizeFlag() cli.Flag {
	return &cli.StringFlag{
		Name:  "max-size",
		Value: defaultMaxSize,
		Usage: "refuse batch files whose tensors add up to more than `SIZE` (bytes, or with KiB, MiB, GiB, TiB)",
	}
}

// maxSize reads --max-size.
func maxSize(c *cli.Context) (int64, error) {
	n, err := fixtures.ParseSize(c.String("max-size"))
	if err != nil {
		return 0, usagef("--max-size %q: %v", c.String("max-size"), err)
	}
	return n, nil
}
