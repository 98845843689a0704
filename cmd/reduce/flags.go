package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"
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
	n, err := parseSize(c.String("max-size"))
	if err != nil {
		return 0, usagef("--max-size %q: %v", c.String("max-size"), err)
	}
	return n, nil
}

// parseSize reads "123", "64MiB", "4GiB", "1.5GB" (decimal units are
// accepted as their binary counterparts would surprise nobody less).
func parseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	units := []struct {
		suffix string
		mult   float64
	}{
		{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10},
		{"TB", 1e12}, {"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3}, {"kB", 1e3},
		{"T", 1 << 40}, {"G", 1 << 30}, {"M", 1 << 20}, {"K", 1 << 10}, {"B", 1},
	}
	mult := 1.0
	for _, u := range units {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.mult
			break
		}
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || v <= 0 || v*mult > 1<<62 {
		return 0, fmt.Errorf("want a positive size such as 4GiB or 1048576")
	}
	return int64(v * mult), nil
}
