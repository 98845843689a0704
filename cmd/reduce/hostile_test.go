package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"reduce/fixtures"
)

// Every file of the bad corpus (fixtures/testdata/bad) is bad input to the
// main job and to inspect: exit 2, one line on stderr naming the file,
// nothing on stdout, nothing written under --out, the file untouched.
func TestBadFilesExitTwo(t *testing.T) {
	files, err := filepath.Glob("../../fixtures/testdata/bad/*.bin")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		name := filepath.Base(f)
		before, err := os.ReadFile(f)
		require.NoError(t, err)
		limit := []string{}
		if strings.Contains(name, "over-max-size") { // bad under a smaller --max-size than the default
			limit = []string{"--max-size", "4000"}
		}
		for _, args := range [][]string{{"--batch", f, "--out", filepath.Join(t.TempDir(), "out"), "-q"}, {"inspect", f}} {
			var stdout, stderr bytes.Buffer
			code := run(append(append([]string{"reduce"}, args...), limit...), &stdout, &stderr)
			assert.Equal(t, ExitUsage, code, "%s %v: %s", name, args[0], stderr.String())
			assert.Empty(t, stdout.String(), name)
			lines := strings.Split(strings.TrimSuffix(stderr.String(), "\n"), "\n")
			if assert.Len(t, lines, 1, "%s: %s", name, stderr.String()) {
				assert.True(t, strings.HasPrefix(lines[0], "reduce: "), lines[0])
				assert.Contains(t, lines[0], name)
			}
			if args[0] == "--batch" {
				assert.NoDirExists(t, args[3], "%s: nothing written", name)
			}
		}
		after, err := os.ReadFile(f)
		require.NoError(t, err)
		assert.Equal(t, before, after, "%s is left as it was", name)
	}
	t.Logf("%d bad files: exit 2 from --batch and inspect, one line naming the file, nothing written", len(files))
}

// TestTerminalEscapes: a file's ids and recorded failure, printed by the
// main job (the summary, its progress lines) and by replay, reach the
// terminal escaped: a file from someone else sets no title, colour or
// clipboard (OSC 52) there; --json as \u escapes, the bidi overrides too.
func TestTerminalEscapes(t *testing.T) {
	b, err := fixtures.Read("../../fixtures/examples/four_class_targets.bin")
	require.NoError(t, err)
	const hostile = "\x1b]0;PWNED\x07\x1b]52;c;ZWNobyBwd25lZA==\x07\x1b[31mred\x1b[0m\u202e"
	b.SampleIDs = []string{"a", "b", hostile}
	b.Error = &fixtures.Failure{Text: "IndexError: Target 4 is out of bounds. " + hostile}
	path := filepath.Join(t.TempDir(), "escapes.bin")
	require.NoError(t, fixtures.Write(path, b))
	for _, args := range [][]string{
		{"reduce", "--batch", path, "--out", filepath.Join(t.TempDir(), "out")},
		{"reduce", "replay", path},
		{"reduce", "--json", "--batch", path, "--out", filepath.Join(t.TempDir(), "out")},
		{"reduce", "replay", "--json", path},
		{"reduce", "replay", "--backend", "exec", "--replay", "sh -c 'echo \"$0\" >&2; exit 1' '" + hostile + "' {batch}", path},
	} {
		var stdout, stderr bytes.Buffer
		run(args, &stdout, &stderr)
		for _, out := range []string{stdout.String(), stderr.String()} {
			assert.NotContains(t, out, "\x1b", "%v: a raw ESC\n%q", args[1:3], out)
			assert.NotContains(t, out, "\u202e", "%v: a raw bidi override", args[1:3])
		}
		assert.True(t, strings.Contains(stdout.String()+stderr.String(), `\x1b]`) || strings.Contains(stdout.String(), `\u001b]`),
			"%v: escaped, not dropped", args[1:3])
	}
}
