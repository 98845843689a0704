package main

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"reduce/fixtures"
)

func inspectCommand() *cli.Command {
	return &cli.Command{
		Name:      "inspect",
		Usage:     "show what a batch file holds",
		UsageText: "reduce inspect [--json] FILE",
		Description: "Prints a table per tensor (name, dtype, shape, strides, storage offset, layout,\n" +
			"batch axis, bytes), the samples and their ids, the operator and its attributes, the\n" +
			"recorded failure and the provenance. --json prints one JSON object instead.",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "json", Usage: "print JSON instead of tables"},
			maxSizeFlag(),
		},
		Action: action(func(c *cli.Context) error {
			if c.NArg() != 1 {
				return usagef("inspect takes one batch file, got %d arguments", c.NArg())
			}
			path := c.Args().First()
			b, err := readBatch(c, path)
			if err != nil {
				return err
			}
			info := describe(path, b)
			if c.Bool("json") {
				enc := json.NewEncoder(c.App.Writer)
				enc.SetIndent("", "  ")
				enc.SetEscapeHTML(false)
				return enc.Encode(info)
			}
			return info.print(c.App.Writer)
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

// batchInfo is what inspect shows; its JSON form is `reduce inspect --json`.
type batchInfo struct {
	File      string            `json:"file"`
	Samples   int64             `json:"samples"`
	SampleIDs []string          `json:"sample_ids"`
	Op        string            `json:"op"`
	Attrs     map[string]any    `json:"attrs"`
	Error     *fixtures.Failure `json:"error"`
	Meta      map[string]string `json:"meta"`
	Tensors   []tensorInfo      `json:"tensors"`
	// Version 2: the step, the batch's leaves besides tensors (per-sample
	// and shared values, skipped leaves) and the state's size.
	Step       *fixtures.Step `json:"step,omitempty"`
	Leaves     []leafInfo     `json:"leaves,omitempty"`
	StateBytes int64          `json:"state_bytes,omitempty"`
}

type leafInfo struct {
	Path   string            `json:"path"`
	Kind   fixtures.NodeKind `json:"kind"`
	Type   string            `json:"type,omitempty"`
	Reason string            `json:"reason,omitempty"`
}

type tensorInfo struct {
	Name           string        `json:"name"`
	DType          string        `json:"dtype"`
	Shape          []int64       `json:"shape"`
	Strides        []int64       `json:"strides"`
	Offset         int64         `json:"offset"`
	RecordedOffset int64         `json:"recorded_offset,omitempty"`
	Layout         string        `json:"layout"`
	BatchDim       *int          `json:"batch_dim"`
	Bytes          int64         `json:"bytes"`
	Pad            *fixtures.Pad `json:"pad,omitempty"`
}

func describe(path string, b *fixtures.Batch) batchInfo {
	info := batchInfo{
		File: path, Samples: b.Samples, SampleIDs: b.SampleIDs, Op: b.Op,
		Attrs: b.Attrs, Error: b.Error, Meta: b.Meta, Tensors: []tensorInfo{}, Step: b.Step,
	}
	b.Structure.Leaves(func(path string, n *fixtures.Node) {
		if n.Kind != fixtures.NodeTensor {
			info.Leaves = append(info.Leaves, leafInfo{Path: path, Kind: n.Kind, Type: n.Type, Reason: n.Reason})
		}
	})
	state := b.StateTensors()
	for _, e := range b.Tensors {
		if state[e.Name] {
			info.StateBytes += int64(len(e.Data))
			continue
		}
		info.Tensors = append(info.Tensors, tensorInfo{
			Name: e.Name, DType: e.DType.String(), Shape: e.Shape, Strides: e.Strides,
			Offset: e.Offset, RecordedOffset: e.RecordedOffset, Layout: e.Layout().String(),
			BatchDim: e.BatchDim, Bytes: int64(len(e.Data)), Pad: e.Pad,
		})
	}
	return info
}

func (info batchInfo) print(w io.Writer) error {
	op := info.Op
	switch {
	case op == "" && info.Step != nil:
		op = "none (the recorded step replays it)"
	case op == "":
		op = "none (replayed with the user's command)"
	}
	fmt.Fprintf(w, "%s: %d samples, op %s\n", info.File, info.Samples, op)
	if len(info.Attrs) > 0 {
		fmt.Fprintf(w, "attributes: %s\n", formatAttrs(info.Attrs))
	}
	if len(info.SampleIDs) > 0 {
		fmt.Fprintf(w, "sample ids: %s\n", abbreviate(info.SampleIDs, 8))
	}
	if info.Step != nil {
		fmt.Fprintf(w, "step: %s (replayed by reduce --batch with the torch backend; ran in %s)\n", info.Step.Entry(), info.Step.Cwd)
	}
	if info.StateBytes > 0 {
		fmt.Fprintf(w, "state: %d bytes of weights, optimizer and RNG states (every candidate replays from it)\n", info.StateBytes)
	}
	for _, l := range info.Leaves {
		switch l.Kind {
		case fixtures.NodeSkipped:
			fmt.Fprintf(w, "skipped %s: %s (%s)\n", l.Path, l.Reason, l.Type)
		case fixtures.NodeSamples:
			fmt.Fprintf(w, "per-sample values: %s\n", l.Path)
		}
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tDTYPE\tSHAPE\tSTRIDES\tOFFSET\tLAYOUT\tBATCH AXIS\tBYTES")
	for _, t := range info.Tensors {
		axis := "none"
		if t.BatchDim != nil {
			axis = fmt.Sprint(*t.BatchDim)
		}
		if t.Pad != nil {
			axis += fmt.Sprintf(", padded along %d", t.Pad.Dim)
		}
		offset := fmt.Sprint(t.Offset)
		if t.RecordedOffset != 0 && t.RecordedOffset != t.Offset {
			offset += fmt.Sprintf(" (recorded %d)", t.RecordedOffset)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\n", t.Name, t.DType, ints(t.Shape), ints(t.Strides),
			offset, t.Layout, axis, t.Bytes)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	if info.Error != nil {
		status := ""
		if info.Error.ExitStatus != nil {
			status = fmt.Sprintf(" (exit status %d)", *info.Error.ExitStatus)
		}
		fmt.Fprintf(w, "recorded failure%s:\n", status)
		for _, line := range strings.Split(strings.TrimRight(info.Error.Text, "\n"), "\n") {
			fmt.Fprintf(w, "  %s\n", line)
		}
	} else {
		fmt.Fprintln(w, "recorded failure: none")
	}
	if len(info.Meta) > 0 {
		fmt.Fprintln(w, "provenance:")
		keys := make([]string, 0, len(info.Meta))
		for k := range info.Meta {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		for _, k := range keys {
			fmt.Fprintf(tw, "  %s\t%s\n", k, info.Meta[k])
		}
		return tw.Flush()
	}
	return nil
}

func ints(v []int64) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = fmt.Sprint(x)
	}
	return "[" + strings.Join(s, ", ") + "]"
}

func formatAttrs(attrs map[string]any) string {
	keys := make([]string, 0, len(attrs))
	for k := range attrs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		v, _ := json.Marshal(attrs[k])
		parts[i] = k + "=" + string(v)
	}
	return strings.Join(parts, ", ")
}

// abbreviate lists ids, eliding the middle of a long list.
func abbreviate(ids []string, keep int) string {
	if len(ids) <= keep+2 {
		return strings.Join(ids, " ")
	}
	return fmt.Sprintf("%s … %s (%d ids)", strings.Join(ids[:keep], " "), strings.Join(ids[len(ids)-2:], " "), len(ids))
}
