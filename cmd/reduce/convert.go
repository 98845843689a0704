package main

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"reduce/fixtures"
	"reduce/internal/trust"
)

func convertCommand() *cli.Command {
	return &cli.Command{
		Name:      "convert",
		Usage:     "import .npz / .npy / .safetensors into a batch file, or export one",
		UsageText: "reduce convert IN -o OUT [--force] [--op NAME] [--attr k=v]... [--batch-dim name=N|none]... [--ids FILE]",
		Description: "IN .npz, .npy (C or Fortran order) or .safetensors, OUT .bin: import. The op, attributes,\n" +
			"batch axes and sample ids come from the file's metadata (safetensors __metadata__, or an\n" +
			"npz member __reduce__.json) and the flags override them.\n" +
			"IN .bin, OUT .npz or .safetensors: export, as contiguous copies of every tensor.\n" +
			"IN .bin, OUT .bin: rewrite (another compression, overridden metadata).\n\n" +
			"Examples:\n" +
			"   reduce convert batch.npz -o crash.bin --op cross_entropy --attr ignore_index=255\n" +
			"   reduce convert logits.npy -o crash.bin --name input --batch-dim input=0\n" +
			"   reduce convert crash.bin -o crash.safetensors",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Usage: "write to `FILE` (.bin, .npz or .safetensors)"},
			&cli.BoolFlag{Name: "force", Usage: "replace OUT if it exists (else exit 2); a symbolic link is replaced by the file, never written through"},
			&cli.StringFlag{Name: "op", Usage: "the built-in operator `NAME` the batch was recorded for"},
			&cli.StringSliceFlag{Name: "attr", Usage: "an operator attribute `KEY=VALUE` (JSON value or string); repeatable"},
			&cli.StringSliceFlag{Name: "batch-dim", Usage: "the batch axis of a tensor, `NAME=N` or NAME=none for a shared tensor; repeatable"},
			&cli.StringFlag{Name: "ids", Usage: "sample ids, one per line, from `FILE`"},
			&cli.StringFlag{Name: "name", Usage: "the tensor `NAME` for a .npy input (default: the file's base name)"},
			&cli.StringFlag{Name: "compression", Value: "zstd", Usage: "payload compression of a .bin output: zstd or none"},
			maxSizeFlag(),
		},
		Action: action(convert),
	}
}

// convert maps the flags to fixtures.ConvertOptions and prints the notes
// and the output's path.
func convert(c *cli.Context) error {
	if c.NArg() != 1 {
		return usagef("convert takes one input file, got %d arguments", c.NArg())
	}
	in, out := c.Args().First(), c.String("output")
	if out == "" {
		return usagef("convert: no output: give -o FILE")
	}
	opt := fixtures.ConvertOptions{Replace: c.Bool("force")}
	if comp := fixtures.Compression(c.String("compression")); comp != fixtures.CompressionZstd && comp != fixtures.CompressionNone {
		return usagef("--compression %q: want zstd or none", comp)
	} else if c.IsSet("compression") {
		opt.Compression = comp
	}
	limit, err := maxSize(c)
	if err != nil {
		return err
	}
	opt.ImportOptions = fixtures.ImportOptions{MaxSize: limit, Name: c.String("name"), Op: c.String("op")}
	for _, a := range c.StringSlice("attr") {
		k, v, err := fixtures.ParseAttr(a)
		if err != nil {
			return usagef("--attr %q: %v", a, err)
		}
		if opt.Attrs == nil {
			opt.Attrs = map[string]any{}
		}
		opt.Attrs[k] = v
	}
	for _, a := range c.StringSlice("batch-dim") {
		name, dim, err := fixtures.ParseBatchDim(a)
		if err != nil {
			return usagef("--batch-dim %q: %v", a, err)
		}
		if opt.BatchDims == nil {
			opt.BatchDims = map[string]*int{}
		}
		opt.BatchDims[name] = dim
	}
	if p := c.String("ids"); p != "" {
		ids, err := fixtures.ReadSampleIDs(p)
		if err != nil {
			return usagef("--ids: %v", err)
		}
		opt.SampleIDs = ids
	}
	var digest string
	opt.Digest = &digest
	notes, err := fixtures.Convert(in, out, opt)
	if err != nil {
		return usageErr(err)
	}
	if f, _ := fixtures.FormatOf(out); f == fixtures.FormatBin && digest != "" {
		if _, err := trust.Carry(digest, out); err != nil { // a batch file of the user's: the output is theirs too
			notes = append(notes, fmt.Sprintf("%s is not marked as yours (%v): reduce trust %s allows it", out, err, fixtures.ShellQuote(out)))
		}
	}
	for _, n := range notes {
		fmt.Fprintf(c.App.ErrWriter, "reduce: note: %s\n", n)
	}
	fmt.Fprintln(c.App.Writer, out)
	return nil
}
