package main

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"reduce/fixtures"
)

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
			if r != '\n' && fixtures.Printable(string(r)) != string(r) {
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
		var got fixtures.Description
		require.NoError(t, json.Unmarshal(stdout.Bytes(), &got))
		assert.Equal(t, b.SampleIDs, got.SampleIDs)
		assert.Equal(t, b.Meta, got.Meta)
		assert.Equal(t, b.Error.Text, got.Error.Text)
		assert.Equal(t, b.Step, got.Step)
		assert.Equal(t, []fixtures.TypeInfo{{Path: "k" + evil, Kind: fixtures.NodeNamedTuple, Type: "os:system"}}, got.Types)
	}
}

// TestInspectShowsSecrets: `reduce inspect` shows the recording as it is:
// the secrets, host and paths that fixture.json, report.md and the
// upstream issue redact are still there, in the table and in --json.
func TestInspectShowsSecrets(t *testing.T) {
	b, err := fixtures.Read("../../fixtures/examples/four_class_targets.bin")
	require.NoError(t, err)
	const secret = "WANDB_API_KEY=0123456789abcdef from /home/alice/x on 10.1.2.3"
	b.Meta = map[string]string{"host": "trn-node-42.hpc.example.edu", "executable": "/home/alice/venv/bin/python"}
	b.Error = &fixtures.Failure{Text: "IndexError: Target 4 is out of bounds. " + secret}
	path := filepath.Join(t.TempDir(), "secret.bin")
	require.NoError(t, fixtures.Write(path, b))
	for _, args := range [][]string{{"inspect", path}, {"inspect", "--json", path}} {
		var stdout, stderr bytes.Buffer
		require.Equal(t, ExitOK, run(append([]string{"reduce"}, args...), &stdout, &stderr), "%s", stderr.String())
		for _, s := range []string{secret, "trn-node-42.hpc.example.edu", "/home/alice/venv/bin/python"} {
			assert.Contains(t, stdout.String(), s, "%v", args)
		}
	}
}
