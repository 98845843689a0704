package main

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"reduce/fixtures"
)

func TestPrintable(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"img-000173", "img-000173"},
		{`C:\data\x1b`, `C:\data\x1b`}, // a backslash is text
		{"é ü 中文 🙂", "é ü 中文 🙂"},
		{"\x1b[2J\x1b]0;pwned\x07", `\x1b[2J\x1b]0;pwned\x07`},
		{"ok\rFAKE", `ok\rFAKE`},
		{"a\nb\tc", `a\nb\tc`},
		{"del\x7f", `del\x7f`},
		{"csi\u009b31m", `csi\u009b31m`},
		{"abc\u202edcba", `abc\u202edcba`},
		{"\u2066iso\u2069 \u200e\u200f\u061c", `\u2066iso\u2069 \u200e\u200f\u061c`},
		{"line\u2028sep", `line\u2028sep`},
		{"bad\xff\xfeutf8", `bad\xff\xfeutf8`},
	} {
		assert.Equal(t, c.want, printable(c.in), "%q", c.in)
	}
}

// FuzzPrintable: whatever a file holds, printable's text is valid UTF-8
// without a rune that drives a terminal, and text without one is kept as it
// is.
func FuzzPrintable(f *testing.F) {
	for _, s := range []string{"", "img-1", "\x1b[31mred", "a\u202eb", "\xc2\x9b", "\xff", "tab\there"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := printable(s)
		if !utf8.ValidString(got) {
			t.Fatalf("printable(%q) = %q: not UTF-8", s, got)
		}
		for _, r := range got {
			if controlRune(r) {
				t.Fatalf("printable(%q) = %q: holds %U", s, got, r)
			}
		}
		clean := utf8.ValidString(s) && !strings.ContainsFunc(s, controlRune)
		if clean && got != s {
			t.Fatalf("printable(%q) = %q: changed clean text", s, got)
		}
		if j := escapeJSON([]byte(`"` + s + `"`)); utf8.ValidString(s) && bytes.ContainsFunc(j, func(r rune) bool { return controlRune(r) && r >= 0x20 }) {
			t.Fatalf("escapeJSON(%q) = %q", s, j)
		}
	})
}

// TestInspectEscapes: a batch whose ids, keys, step, failure and provenance
// hold terminal escapes, carriage returns, C1 controls and bidi overrides
// prints none of them raw, in the table or in --json, and --json still
// decodes to the file's values.
func TestInspectEscapes(t *testing.T) {
	b, err := fixtures.Read("../../fixtures/examples/four_class_targets.bin")
	require.NoError(t, err)
	evil := "\x1b]0;pwned\x07\x1b[2J\rok \u009b31m \u202etxt.exe"
	b.SampleIDs = []string{"a" + evil, "b\ncounterfeit line", "c"}
	b.Meta = map[string]string{"torch" + evil: "1.13" + evil}
	b.Error = &fixtures.Failure{Text: "IndexError: Target 4 is out of bounds.\n" + evil}
	b.Op = ""
	b.Attrs = nil
	b.Step = &fixtures.Step{Module: "os", Qualname: "system", File: "/tmp/" + evil, Cwd: evil}
	key := func(s string) json.RawMessage { k, _ := json.Marshal(s); return k }
	b.Structure = &fixtures.Node{Kind: fixtures.NodeDict, Keys: []json.RawMessage{key("input"), key("target"), key("k" + evil)},
		Items: []*fixtures.Node{
			{Kind: fixtures.NodeTensor, Name: "input"}, {Kind: fixtures.NodeTensor, Name: "target"},
			{Kind: fixtures.NodeNamedTuple, Type: "os:system", Keys: []json.RawMessage{key("command")},
				Items: []*fixtures.Node{{Kind: fixtures.NodeValue, Value: key("touch marker" + evil)}}},
		}}
	path := filepath.Join(t.TempDir(), "evil.bin")
	require.NoError(t, fixtures.Write(path, b))

	for _, args := range [][]string{{"inspect", path}, {"inspect", "--json", path}} {
		var stdout, stderr bytes.Buffer
		require.Equal(t, ExitOK, run(append([]string{"reduce"}, args...), &stdout, &stderr), "%s", stderr.String())
		out := stdout.String()
		for i, r := range out {
			if r != '\n' && controlRune(r) {
				t.Errorf("%v: %U at %d raw in:\n%s", args, r, i, out)
				break
			}
		}
		if args[1] != "--json" {
			assert.Contains(t, out, `sample ids: a\x1b]0;pwned\x07\x1b[2J\rok \u009b31m \u202etxt.exe b\ncounterfeit line c`)
			assert.Contains(t, out, "step: os:system (replayed by reduce --batch with the torch backend)\n  file: /tmp/\\x1b]0;")
			assert.Contains(t, out, "  k\\x1b]0;pwned\\x07\\x1b[2J\\rok \\u009b31m \\u202etxt.exe: namedtuple os:system\n")
			assert.NotContains(t, out, "\ncounterfeit line")
			continue
		}
		var got batchInfo
		require.NoError(t, json.Unmarshal(stdout.Bytes(), &got))
		assert.Equal(t, b.SampleIDs, got.SampleIDs)
		assert.Equal(t, b.Meta, got.Meta)
		assert.Equal(t, b.Error.Text, got.Error.Text)
		assert.Equal(t, b.Step, got.Step)
		assert.Equal(t, []typeInfo{{Path: "k" + evil, Kind: fixtures.NodeNamedTuple, Type: "os:system"}}, got.Types)
	}
}
