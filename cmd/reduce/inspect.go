package main

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"unicode/utf8"

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
			"step the file names (its module, function and file) and the class it rebuilds, the\n" +
			"named tuple and mapping types of its structure, the recorded failure and the\n" +
			"provenance. --json prints one JSON object instead. Control characters from the file\n" +
			"(ESC, CR, C1, bidi overrides) are printed escaped (\\x1b, \\u202e).",
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
				var buf bytes.Buffer
				enc := json.NewEncoder(&buf)
				enc.SetIndent("", "  ")
				enc.SetEscapeHTML(false)
				if err := enc.Encode(info); err != nil {
					return err
				}
				_, err := c.App.Writer.Write(escapeJSON(buf.Bytes()))
				return err
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
	// StepClass is the class the step rebuilds (a LightningModule), and
	// Types the named tuple and mapping classes the structure and the
	// state name: code the file names, which load() never imports.
	StepClass *fixtures.Step `json:"step_class,omitempty"`
	Types     []typeInfo     `json:"types,omitempty"`
}

type typeInfo struct {
	Path string            `json:"path"`
	Kind fixtures.NodeKind `json:"kind"`
	Type string            `json:"type"`
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
		Attrs: b.Attrs, Error: b.Error, Meta: b.Meta, Tensors: []tensorInfo{}, Step: b.Step, StepClass: b.StepClass(),
	}
	b.Structure.Leaves(func(path string, n *fixtures.Node) {
		if n.Kind != fixtures.NodeTensor {
			info.Leaves = append(info.Leaves, leafInfo{Path: path, Kind: n.Kind, Type: n.Type, Reason: n.Reason})
		}
	})
	for _, tree := range []struct {
		prefix string
		root   *fixtures.Node
	}{{"", b.Structure}, {"state", b.State}} {
		tree.root.Walk(func(path string, n *fixtures.Node) {
			if n.Kind == fixtures.NodeNamedTuple || n.Kind == fixtures.NodeMapping {
				switch {
				case tree.prefix != "" && path != "":
					path = tree.prefix + "." + path
				case path == "":
					path = cmp.Or(tree.prefix, "batch")
				}
				info.Types = append(info.Types, typeInfo{Path: path, Kind: n.Kind, Type: n.Type})
			}
		})
	}
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

// print writes info as tables for a person. Every string from the file
// goes through printable: a file may come from someone else, and its ids,
// names and texts must not drive the terminal.
func (info batchInfo) print(w io.Writer) error {
	p := printable
	op := p(info.Op)
	switch {
	case op == "" && info.Step != nil:
		op = "none (the recorded step replays it)"
	case op == "":
		op = "none (replayed with the user's command)"
	}
	fmt.Fprintf(w, "%s: %d samples, op %s\n", p(info.File), info.Samples, op)
	if len(info.Attrs) > 0 {
		fmt.Fprintf(w, "attributes: %s\n", p(formatAttrs(info.Attrs)))
	}
	if len(info.SampleIDs) > 0 {
		ids := make([]string, len(info.SampleIDs))
		for i, id := range info.SampleIDs {
			ids[i] = p(id)
		}
		fmt.Fprintf(w, "sample ids: %s\n", abbreviate(ids, 8))
	}
	if s := info.Step; s != nil {
		fmt.Fprintf(w, "step: %s (replayed by reduce --batch with the torch backend)\n", p(s.Module+":"+s.Qualname))
		fmt.Fprintf(w, "  file: %s\n  ran in: %s\n", p(cmp.Or(s.File, "none recorded")), p(cmp.Or(s.Cwd, "none recorded")))
		if c := info.StepClass; c != nil {
			fmt.Fprintf(w, "  rebuilds the class %s (file %s)\n", p(c.Module+":"+c.Qualname), p(cmp.Or(c.File, "none recorded")))
		}
		fmt.Fprintln(w, "  replayed only from a file under the directory reduce runs in that is not installed; else with --trust-step")
	}
	if info.StateBytes > 0 {
		fmt.Fprintf(w, "state: %d bytes of weights, optimizer and RNG states (every candidate replays from it)\n", info.StateBytes)
	}
	for _, l := range info.Leaves {
		switch l.Kind {
		case fixtures.NodeSkipped:
			fmt.Fprintf(w, "skipped %s: %s (%s)\n", p(l.Path), p(l.Reason), p(l.Type))
		case fixtures.NodeSamples:
			fmt.Fprintf(w, "per-sample values: %s\n", p(l.Path))
		}
	}
	if len(info.Types) > 0 {
		fmt.Fprintln(w, "types the file names (load() imports none of them: a named tuple of the fields, or a dict):")
		for _, t := range info.Types {
			fmt.Fprintf(w, "  %s: %s %s\n", p(t.Path), t.Kind, p(t.Type))
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
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\n", p(t.Name), t.DType, ints(t.Shape), ints(t.Strides),
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
			fmt.Fprintf(w, "  %s\n", p(line))
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
			fmt.Fprintf(tw, "  %s\t%s\n", p(k), p(info.Meta[k]))
		}
		return tw.Flush()
	}
	return nil
}

// controlRune reports whether r, printed raw, could drive a terminal or reorder
// the text around it: C0 and C1 controls (ESC, CR, BS, CSI...), DEL, the
// bidirectional overrides, embeddings, isolates and marks, and the line and
// paragraph separators.
func controlRune(r rune) bool {
	switch {
	case r < 0x20, r >= 0x7f && r <= 0x9f:
		return true
	case r == 0x061c, r == 0x200e, r == 0x200f, r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069:
		return true
	case r == 0x2028, r == 0x2029:
		return true
	}
	return false
}

// printable is s with every rune controlRune reports escaped as Go writes
// it (\t, \r, \n, \x1b, \u202e) and every byte that is not UTF-8 as \xNN;
// any other text, backslashes included, is unchanged.
func printable(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case controlRune(r) && r < 0x80:
			fmt.Fprintf(&b, `\x%02x`, r)
		case controlRune(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// escapeJSON is the JSON text data with every rune controlRune reports that
// encoding/json writes raw (DEL, C1, the bidirectional controls) written as
// a \u escape: the same JSON values, nothing a terminal acts on. (It escapes
// C0 controls and the line separators itself, so that the C0 left is the
// indentation's, and writes invalid UTF-8 as U+FFFD.) Such a rune can only
// be inside a string.
func escapeJSON(data []byte) []byte {
	var b bytes.Buffer
	for i := 0; i < len(data); {
		r, n := utf8.DecodeRune(data[i:])
		if controlRune(r) && r >= 0x20 {
			fmt.Fprintf(&b, `\u%04x`, r)
		} else {
			b.Write(data[i : i+n])
		}
		i += n
	}
	return b.Bytes()
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
